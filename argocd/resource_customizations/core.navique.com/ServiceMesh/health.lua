-- Argo CD health check for core.navique.com/ServiceMesh (the mesh operator).
-- It reads the operator's conditions (docs/servicemesh.md,
-- docs/troubleshooting.md): the kstatus pair (Reconciling, Stalled), Ready,
-- and the enrollment conditions Ready does not sum up. Tested in e2e/argocd
-- against status the operator's own code computed
-- (mesh-operator/internal/controller/testdata/argocd).
-- Argo CD runs each kind's script alone, with no module to share, so the
-- small helpers below stand in both operators' scripts.
local hs = {}

local function said(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

local function set(status, message)
  hs.status = status
  hs.message = message
  return hs
end

if obj.status == nil or obj.status.conditions == nil then
  return set("Progressing", "Waiting for the mesh operator to report status")
end
local cond = {}
for _, c in ipairs(obj.status.conditions) do
  cond[c.type] = c
end
local generation = obj.metadata.generation or 0
local function current(c)
  return c ~= nil and (c.observedGeneration == nil or c.observedGeneration >= generation)
end
local function is(t, status)
  return current(cond[t]) and cond[t].status == status
end

if (obj.status.observedGeneration or 0) < generation then
  return set("Progressing", "Waiting for the mesh operator to observe generation " .. generation)
end
-- Blocked, deferred, a failed step or an unreadable license: someone must act.
if is("Stalled", "True") then
  return set("Degraded", said(cond["Stalled"]))
end
-- Converging, or being deleted.
if is("Reconciling", "True") then
  return set("Progressing", said(cond["Reconciling"]))
end
-- A mesh refused (not named cluster) or locked by its license carries no
-- kstatus pair: Ready says why.
if is("Refused", "True") then
  return set("Degraded", said(cond["Refused"]))
end
if is("PreviewLocked", "True") then
  return set("Degraded", said(cond["PreviewLocked"]))
end
-- The enrollment: a failed pass, a conflict or NetworkPolicies that would
-- cut Pods off in ambient keep namespaces out of the mesh.
for _, t in ipairs({ "EnrollmentFailed", "EnrollmentConflict", "AmbientNetworkPolicy" }) do
  local c = cond[t]
  if current(c) and c.status ~= "False" then
    return set("Degraded", t .. ": " .. said(c))
  end
end
if is("MTLSCutover", "False") and cond["MTLSCutover"].reason == "ForeignPeerAuthentication" then
  return set("Degraded", "MTLSCutover: " .. said(cond["MTLSCutover"]))
end
-- On the way: a data-plane migration, namespaces waiting for the STRICT
-- cutover or for the strict-isolation baseline. A maintenance window or
-- mtls.mode permissive holding PERMISSIVE is the user's choice.
if is("DataPlaneMigration", "True") then
  return set("Progressing", "DataPlaneMigration: " .. said(cond["DataPlaneMigration"]))
end
if is("MTLSCutover", "False") and cond["MTLSCutover"].reason ~= "HeldPermissive" then
  return set("Progressing", "MTLSCutover: " .. said(cond["MTLSCutover"]))
end
if is("StrictIsolation", "False") then
  return set("Progressing", "StrictIsolation: " .. said(cond["StrictIsolation"]))
end

if is("Ready", "True") then
  return set("Healthy", said(cond["Ready"]))
end
if cond["Ready"] == nil or not current(cond["Ready"]) then
  return set("Progressing", "Waiting for the mesh operator to report Ready")
end
return set("Degraded", said(cond["Ready"]))
