-- Argo CD health check for celld.eric.dev/CelldFleet (the fleet operator).
-- It reads the operator's conditions (docs/fleet.md, docs/troubleshooting.md):
-- the kstatus pair (Reconciling, Stalled), Reconciled, Ready, and the aspects
-- Ready does not sum up (MeshReady, RoutingReady, DisksResized,
-- NamespaceDeclared). Tested in e2e/argocd against status the operator's own
-- code computed (fleet-operator/internal/controller/testdata/argocd).
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
  return set("Progressing", "Waiting for the fleet operator to report status")
end
local cond = {}
for _, c in ipairs(obj.status.conditions) do
  cond[c.type] = c
end
local generation = obj.metadata.generation or 0
-- A condition written for an older generation says nothing of this one.
local function current(c)
  return c ~= nil and (c.observedGeneration == nil or c.observedGeneration >= generation)
end
local function is(t, status)
  return current(cond[t]) and cond[t].status == status
end

-- A failed reconcile step is retried, but it is an error now; it does not
-- advance status.observedGeneration, so it is read first.
if is("Reconciled", "False") then
  return set("Degraded", said(cond["Reconciled"]))
end
if (obj.status.observedGeneration or 0) < generation then
  return set("Progressing", "Waiting for the fleet operator to observe generation " .. generation)
end
-- Stalled: blocked by something outside the fleet, or members refused by
-- the API server; someone must act.
if is("Stalled", "True") then
  return set("Degraded", said(cond["Stalled"]))
end
-- Members lost (a restarted celld container, a runtime reporting itself
-- unhealthy) while the operator waits for them.
if obj.status.phase == "Degraded" then
  return set("Degraded", "Members are not healthy: " .. said(cond["Ready"] or cond["Provisioning"]))
end
-- spec.maintenance.paused holds member changes: the user's choice.
if is("Reconciling", "False") and (cond["Reconciling"].reason == "MaintenancePaused" or cond["Reconciling"].reason == "RollPaused") then
  return set("Suspended", said(cond["Reconciling"]))
end
if is("Reconciling", "True") then
  return set("Progressing", said(cond["Reconciling"]))
end

-- The aspects Ready does not sum up. Reasons on the way somewhere are
-- Progressing; an admin's choice or a finished state is fine; any other
-- False is something to fix.
local progressing = {
  MeshReady = { AwaitingEnrollment = true, JoiningMesh = true, LeavingMesh = true, ProxyMissing = true },
  RoutingReady = { AwaitingGateway = true, AwaitingAddress = true, RemovingOldRoute = true },
}
local fine = {
  MeshReady = { NamespaceOptedOut = true, LeftMesh = true },
}
local waiting = nil
for _, t in ipairs({ "DisksResized", "NamespaceDeclared", "MeshReady", "RoutingReady" }) do
  local c = cond[t]
  if current(c) and c.status ~= "True" then
    if progressing[t] ~= nil and progressing[t][c.reason] then
      waiting = waiting or c
    elseif c.reason == "MaintenancePaused" then
      return set("Suspended", t .. ": " .. said(c))
    elseif not (fine[t] ~= nil and fine[t][c.reason]) then
      return set("Degraded", t .. ": " .. said(c))
    end
  end
end
if waiting ~= nil then
  return set("Progressing", waiting.type .. ": " .. said(waiting))
end

if is("Ready", "True") then
  return set("Healthy", said(cond["Ready"]))
end
if cond["Ready"] == nil or not current(cond["Ready"]) then
  return set("Progressing", "Waiting for the fleet operator to report Ready")
end
return set("Degraded", said(cond["Ready"]))
