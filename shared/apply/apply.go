// Package apply writes desired objects with server-side apply, but only when
// the live object differs from what we want, so an unchanged object costs no
// write, and it refuses to touch objects that another owner controls.
package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Result says what Apply did.
type Result string

const (
	// Unchanged: the live object already matched; nothing was sent.
	Unchanged Result = "Unchanged"
	// Created: the object did not exist.
	Created Result = "Created"
	// Updated: the live object differed and was re-applied.
	Updated Result = "Updated"
)

// ConflictError reports an object with our name that belongs to someone else.
type ConflictError struct {
	Kind, Namespace, Name string
	Owner                 string
	// Holder is the live object's controller ("KIND NAME"), empty when it
	// has none: with it the message names both sides of a collision.
	Holder string
}

func (e *ConflictError) Error() string {
	if e.Holder != "" {
		return fmt.Sprintf("%s %s/%s is controlled by %s, not by %s; it is left alone (rename one of them, or delete the object to let the operator manage it)", e.Kind, e.Namespace, e.Name, e.Holder, e.Owner)
	}
	return fmt.Sprintf("%s %s/%s exists and is not owned by %s; it is left alone (rename or delete it to let the operator manage it)", e.Kind, e.Namespace, e.Name, e.Owner)
}

// HolderOf describes obj's controller as "KIND NAME", "" when it has none.
func HolderOf(obj metav1.Object) string {
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		return ref.Kind + " " + ref.Name
	}
	return ""
}

// Applier applies objects as one field manager.
type Applier struct {
	// Client writes, and reads the live objects of kinds that Cache does not
	// serve. Reads go through it as unstructured objects, which
	// controller-runtime's client sends to the API server (uncached).
	Client client.Client
	// Cache, when set, serves the live reads of the kinds in CachedKinds:
	// typed objects for kinds in Client's scheme, unstructured otherwise.
	// Give it the manager's cache (or its cache-backed client) and list only
	// kinds the caller already watches, so no new informer is started. A
	// NotFound from Cache leads to a create-only apply (createOnly), without
	// a read first: an object the cache has not seen yet, foreign or ours,
	// makes that create fail, and is then read from the API server and
	// judged exactly as without a cache.
	Cache client.Reader
	// CachedKinds are the kinds Cache serves; every other kind is read
	// through Client.
	CachedKinds []schema.GroupKind
	// FieldManager names the writer in managedFields.
	FieldManager string
	// HashAnnotation is where the hash of the last applied desired object is
	// kept. A changed hash means fields may have been dropped from the desired
	// object, which a subset comparison cannot see.
	HashAnnotation string
}

// Apply makes the object desired (a typed object with TypeMeta set) live.
// owner, when set, must be desired's controller: a live object without that
// controller UID is a ConflictError and is never written. An object that is
// not there is created only if nothing holds the name when the create
// arrives (createOnly), so one appearing after the read is never taken over.
func (a *Applier) Apply(ctx context.Context, desired client.Object, owner metav1.Object) (Result, error) {
	res, _, err := a.apply(ctx, desired, owner, nil, false)
	return res, err
}

// ApplyAndRead is Apply that also returns the object as it stands
// afterwards (a copy the caller may keep): the live one when nothing was
// written, else the API server's answer to the write. A caller that goes on
// with the object need not read back one it has just created, which the
// cache may not hold yet.
func (a *Applier) ApplyAndRead(ctx context.Context, desired client.Object, owner metav1.Object) (Result, client.Object, error) {
	res, after, err := a.apply(ctx, desired, owner, nil, false)
	if err != nil {
		return "", nil, err
	}
	return res, after.DeepCopyObject().(client.Object), nil
}

// ApplyOver is Apply for a caller that holds the live object already: it
// listed its own objects a moment ago. That object is compared with instead
// of reading it once more. A nil live is one the caller's list did not
// have: it is created only if nothing holds the name (createOnly), without a
// read first; an object of someone else with desired's name makes the create
// fail, and is then read and refused as Apply refuses it.
// It also returns the object as it stands afterwards: the live one when
// nothing was written, else the apply's answer, so a caller that decides
// again in the same pass need not read it back.
func (a *Applier) ApplyOver(ctx context.Context, desired client.Object, owner metav1.Object, known *unstructured.Unstructured) (Result, *unstructured.Unstructured, error) {
	var live client.Object
	if known != nil {
		live = known
	}
	res, after, err := a.apply(ctx, desired, owner, live, true)
	if err != nil {
		return "", nil, err
	}
	u, err := asUnstructured(after, desired.GetObjectKind().GroupVersionKind())
	if err != nil {
		return "", nil, err
	}
	return res, u, nil
}

// apply is Apply over a live object the caller may hold. The object it
// returns may be the cache's own (see cacheRead): it is read, never changed.
func (a *Applier) apply(ctx context.Context, desired client.Object, owner metav1.Object, live client.Object, listed bool) (Result, client.Object, error) {
	gvk := desired.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" {
		return "", nil, fmt.Errorf("apply %T %s: TypeMeta must be set for server-side apply", desired, desired.GetName())
	}
	// A typed desired object is hashed, and compared with a live object of
	// its type, without its unstructured form, which only a write needs;
	// content builds that form once, where it is needed.
	var desiredMap map[string]any
	content := func() (map[string]any, error) {
		var err error
		if desiredMap == nil {
			desiredMap, err = desiredContent(desired)
		}
		return desiredMap, err
	}
	hash, walked, err := hashDesired(desired)
	if err != nil {
		return "", nil, err
	}
	if !walked {
		m, err := content()
		if err != nil {
			return "", nil, err
		}
		if hash, err = hashOf(m); err != nil {
			return "", nil, err
		}
	}

	key := client.ObjectKeyFromObject(desired)
	switch {
	case live != nil:
	case listed:
		err = apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, key.Name)
	case a.cached(gvk.GroupKind()):
		// A cache miss is not confirmed with a read: the create-only apply
		// below is refused if anything holds the name, ours (where the
		// cache lags) or someone else's, and only then is it read.
		live, err = a.cacheRead(ctx, gvk, key)
	default:
		live, err = a.uncachedRead(ctx, gvk, key)
	}
	if apierrors.IsNotFound(err) {
		// Nothing in sight holds the name: create the object, on the
		// condition that nothing holds it on the API server either. The
		// caller's list needs no read to confirm it.
		m, cerr := content()
		if cerr != nil {
			return "", nil, cerr
		}
		setAnnotation(m, a.HashAnnotation, hash)
		created, cerr := a.createOnly(ctx, m)
		if cerr == nil {
			return Created, created, nil
		}
		if !apierrors.IsConflict(cerr) {
			return "", nil, fmt.Errorf("creating %s %s/%s: %w", gvk.Kind, desired.GetNamespace(), desired.GetName(), cerr)
		}
		// An object holds the name (someone else's, or ours where the cache
		// lags): it is read and judged as any live object is.
		live, err = a.uncachedRead(ctx, gvk, key)
		if apierrors.IsNotFound(err) {
			// Gone again since the refused create: nothing is created
			// without the precondition; the caller's next look starts over.
			return "", nil, fmt.Errorf("creating %s %s/%s: %w", gvk.Kind, desired.GetNamespace(), desired.GetName(), cerr)
		}
	}
	if err != nil {
		return "", nil, err
	}
	// From here the object exists: it is judged, and updated if it is ours.
	if owner != nil && !metav1.IsControlledBy(live, owner) {
		return "", nil, &ConflictError{Kind: gvk.Kind, Namespace: desired.GetNamespace(), Name: desired.GetName(), Owner: fmt.Sprintf("%s (uid %s)", owner.GetName(), owner.GetUID()), Holder: HolderOf(live)}
	}
	if live.GetAnnotations()[a.HashAnnotation] == hash {
		same, ok := false, false
		if walked {
			same, ok = matchDesired(desired, live)
		}
		if !ok {
			m, err := content()
			if err != nil {
				return "", nil, err
			}
			if same, err = matches(m, live, gvk); err != nil {
				return "", nil, err
			}
		}
		if same {
			return Unchanged, live, nil
		}
	}
	if _, err := content(); err != nil {
		return "", nil, err
	}
	setAnnotation(desiredMap, a.HashAnnotation, hash)
	// The client decodes the API server's answer into the apply
	// configuration's object.
	answer := &unstructured.Unstructured{Object: desiredMap}
	if err := a.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(answer), client.FieldOwner(a.FieldManager), client.ForceOwnership); err != nil {
		return "", nil, fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, desired.GetNamespace(), desired.GetName(), err)
	}
	return Updated, answer, nil
}

// createOnlyResourceVersion is the precondition of createOnly: no stored
// object can have it (etcd's revisions are int64 counters far below it), so
// the API server refuses the apply with a conflict whenever an object holds
// the name, and it ignores a resourceVersion when the apply creates.
const createOnlyResourceVersion = "9223372036854775807"

// createOnly applies m, the whole desired content, only if no object holds
// its name: a create in one request that never touches an existing object,
// foreign or ours (a conflict error says one exists). Without it a create
// needed a read first, and an object of someone else's that appeared between
// the read and the forced apply was taken over. The returned object is the
// API server's answer; m itself is not changed.
func (a *Applier) createOnly(ctx context.Context, m map[string]any) (*unstructured.Unstructured, error) {
	req := maps.Clone(m)
	meta, _ := req["metadata"].(map[string]any)
	meta = maps.Clone(meta)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["resourceVersion"] = createOnlyResourceVersion
	req["metadata"] = meta
	answer := &unstructured.Unstructured{Object: req}
	if err := a.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(answer), client.FieldOwner(a.FieldManager), client.ForceOwnership); err != nil {
		return nil, err
	}
	return answer, nil
}

// desiredContent is what is applied: desired's unstructured form without
// the nulls the converter writes for unset fields, and without status. The
// applied hash is of this content (before the hash annotation is added).
func desiredContent(desired client.Object) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	if err != nil {
		return nil, err
	}
	pruneNulls(m)
	delete(m, "status")
	return m, nil
}

// matches reports whether live already holds every field of want. A typed
// object is compared as it is, without converting it, where typedSubset
// can (see there).
func matches(want map[string]any, live client.Object, gvk schema.GroupVersionKind) (bool, error) {
	if u, ok := live.(*unstructured.Unstructured); ok {
		return Subset(want, u.Object), nil
	}
	if same, ok := typedSubset(want, live); ok {
		return same, nil
	}
	u, err := asUnstructured(live, gvk)
	if err != nil {
		return false, err
	}
	return Subset(want, u.Object), nil
}

// Observed reads the object of kind gvk from Cache when it serves the kind,
// and from the API server otherwise. Unlike Apply it does not confirm a
// NotFound from Cache: callers use it to find their own objects, which a
// cache restricted to the writer's objects holds, so a writer with nothing
// to clean up asks the API server nothing. An object created a moment ago
// may be missed; its watch event brings the caller back.
func (a *Applier) Observed(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (*unstructured.Unstructured, error) {
	if a.cached(gvk.GroupKind()) {
		return a.cacheGet(ctx, gvk, key)
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(gvk)
	if err := a.Client.Get(ctx, key, live); err != nil {
		return nil, err
	}
	return live, nil
}

// live reads the object of kind gvk as an unstructured object of the
// caller's own: see liveObject.
func (a *Applier) live(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (*unstructured.Unstructured, error) {
	obj, err := a.liveObject(ctx, gvk, key)
	if err != nil {
		return nil, err
	}
	return asUnstructured(obj, gvk)
}

// liveObject reads the object of kind gvk: from Cache when it serves the
// kind, from the API server (through Client) when it does not or when the
// cache has no such object. What it returns from a typed cache is the
// cache's own object (see cacheRead).
func (a *Applier) liveObject(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (client.Object, error) {
	if a.cached(gvk.GroupKind()) {
		obj, err := a.cacheRead(ctx, gvk, key)
		if !apierrors.IsNotFound(err) {
			return obj, err
		}
	}
	return a.uncachedRead(ctx, gvk, key)
}

// uncachedRead reads the object of kind gvk from the API server.
func (a *Applier) uncachedRead(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (client.Object, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(gvk)
	if err := a.Client.Get(ctx, key, live); err != nil {
		return nil, err
	}
	return live, nil
}

func (a *Applier) cached(gk schema.GroupKind) bool {
	if a.Cache == nil {
		return false
	}
	for _, k := range a.CachedKinds {
		if k == gk {
			return true
		}
	}
	return false
}

// cacheGet reads from Cache and returns the object in the unstructured
// form callers keep and may change.
func (a *Applier) cacheGet(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (*unstructured.Unstructured, error) {
	obj, err := a.cacheRead(ctx, gvk, key)
	if err != nil {
		return nil, err
	}
	return asUnstructured(obj, gvk)
}

// cacheRead reads from Cache, typed where the scheme knows the kind (the
// informers of typed watches hold typed objects). A typed object is the
// cache's own, not a copy: it is only read or converted (which copies),
// never changed, and never handed to a caller. Copying it first cost as
// much as the comparison at a cold restart.
func (a *Applier) cacheRead(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (client.Object, error) {
	if a.Client == nil || a.Client.Scheme() == nil || !a.Client.Scheme().Recognizes(gvk) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		if err := a.Cache.Get(ctx, key, u); err != nil {
			return nil, err
		}
		return u, nil
	}
	ro, err := a.Client.Scheme().New(gvk)
	if err != nil {
		return nil, err
	}
	typed, ok := ro.(client.Object)
	if !ok {
		return nil, fmt.Errorf("apply: %s is not a client.Object", gvk)
	}
	if err := a.Cache.Get(ctx, key, typed, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return typed, nil
}

// asUnstructured returns obj in unstructured form: an unstructured obj as
// it is, a typed one converted (a copy) and given kind gvk, since typed
// objects from a cache may carry no TypeMeta.
func asUnstructured(obj client.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// Delete removes the named object if it exists and owner controls it.
// A foreign object is a ConflictError and is left in place. An unstructured
// obj of a kind Cache serves is read from the cache; a typed obj is read
// through Client (the caller's client decides whether that is cached).
func (a *Applier) Delete(ctx context.Context, obj client.Object, owner metav1.Object) (bool, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok && a.cached(u.GroupVersionKind().GroupKind()) {
		live, err := a.live(ctx, u.GroupVersionKind(), client.ObjectKeyFromObject(obj))
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		u.Object = live.Object
	} else if err := a.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if owner != nil && !metav1.IsControlledBy(obj, owner) {
		return false, &ConflictError{Kind: obj.GetObjectKind().GroupVersionKind().Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Owner: owner.GetName(), Holder: HolderOf(obj)}
	}
	if obj.GetDeletionTimestamp() != nil {
		return false, nil
	}
	uid := obj.GetUID()
	err := a.Client.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func hashOf(m map[string]any) (string, error) {
	buf := hashBuffers.Get().(*[]byte)
	defer hashBuffers.Put(buf)
	b, err := appendJSON((*buf)[:0], m) // map keys are sorted: the hash is stable
	if err != nil {
		return "", err
	}
	*buf = b
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

var hashBuffers = sync.Pool{New: func() any { return new([]byte) }}

func setAnnotation(obj map[string]any, key, value string) {
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann[key] = value
}

// pruneNulls drops null values the converter writes for unset optional
// fields (creationTimestamp: null); they are not meant as values. Empty maps
// stay: `podSelector: {}` or `emptyDir: {}` mean something.
func pruneNulls(m map[string]any) {
	for k, v := range m {
		switch t := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			pruneNulls(t)
		case []any:
			for _, e := range t {
				if em, ok := e.(map[string]any); ok {
					pruneNulls(em)
				}
			}
		}
	}
}

// Subset reports whether every field set in want has the same value in
// live. An empty map in want also matches a missing field. Fields only live has (server defaults, other writers) are ignored;
// lists must have the same length and match element by element.
func Subset(want, live any) bool {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			lv, ok := l[k]
			if !ok {
				// The server omits empty structs such as resources: {}.
				if wm, isMap := wv.(map[string]any); isMap && len(wm) == 0 {
					continue
				}
				return false
			}
			if !Subset(wv, lv) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(w) {
			return false
		}
		for i := range w {
			if !Subset(w[i], l[i]) {
				return false
			}
		}
		return true
	case string:
		if l, isString := live.(string); isString {
			return w == l
		}
		return w == fmt.Sprint(live)
	default:
		return fmt.Sprint(want) == fmt.Sprint(live)
	}
}
