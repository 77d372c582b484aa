package apply

import (
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// The kinds the operators apply (and Pods, the deepest core type), filled
// at random; every want derived from one is judged by typedSubset and by
// Subset over the converted object, and the two must agree.
func TestTypedSubsetAgreesWithConversion(t *testing.T) {
	rnd, fill := randomFiller(t)
	derivations := []func(map[string]any, *rand.Rand) map[string]any{exactCopy, someFields, oneLeafChanged, oneFieldAdded, oneLeafRetyped, oneNodeFlattened}
	var judged, matched, fellBack int
	for _, newObj := range appliedKinds {
		for range 150 {
			live := newObj()
			fill.Fill(live)
			liveMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
			if err != nil {
				continue // a fill the converter refuses is no case for either
			}
			for d, derive := range derivations {
				want := derive(liveMap, rnd)
				pruneNulls(want)
				want["apiVersion"], want["kind"] = "example.com/v1", "Kind"
				// The Applier reads a typed object as desired's kind.
				asRead := runtime.DeepCopyJSON(liveMap)
				asRead["apiVersion"], asRead["kind"] = want["apiVersion"], want["kind"]
				converted := Subset(want, asRead)
				typed, ok := typedSubset(want, live)
				judged++
				if !ok {
					// Only a scalar where the object has a struct, map or
					// list is outside the walk.
					require.Equalf(t, len(derivations)-1, d, "%T: the typed walk gave up on a want of the object's own shape\nwant: %v", live, want)
					fellBack++
					continue
				}
				require.Equalf(t, converted, typed, "%T: typedSubset disagrees with Subset over the conversion\nwant: %v\nlive: %v", live, want, liveMap)
				if typed {
					matched++
				}
			}
		}
	}
	t.Logf("%d judged, %d matched, %d fell back to the conversion", judged, matched, fellBack)
	assert.Greater(t, matched, judged/10, "too few matching cases to mean anything")
	assert.Greater(t, fellBack, 0, "no case reached the fallback")
}

// servedStatefulSet returns what a builder asks for, as the Applier compares
// it, and a maker of the StatefulSet the API server serves for it.
func servedStatefulSet(tb testing.TB) (want map[string]any, served func() *appsv1.StatefulSet) {
	desired := &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f", Labels: map[string]string{"app": "f"}},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "f"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "f"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "celld", Image: "celld:1",
					Ports:     []corev1.ContainerPort{{Name: "app", ContainerPort: 8080}, {Name: "peer", ContainerPort: 8081}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				}}},
			},
		},
	}
	want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	require.NoError(tb, err)
	pruneNulls(want)
	delete(want, "status")

	served = func() *appsv1.StatefulSet {
		s := desired.DeepCopy()
		s.TypeMeta = metav1.TypeMeta{} // as a typed cache holds it
		s.UID, s.ResourceVersion, s.Generation = "u", "42", 1
		s.CreationTimestamp = metav1.Unix(1_700_000_000, 0)
		s.Labels["someone.else/label"] = "x"
		s.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
		s.Spec.RevisionHistoryLimit = ptr.To(int32(10))
		c := &s.Spec.Template.Spec.Containers[0]
		c.TerminationMessagePath, c.ImagePullPolicy = "/dev/termination-log", corev1.PullIfNotPresent
		c.Ports[0].Protocol, c.Ports[1].Protocol = corev1.ProtocolTCP, corev1.ProtocolTCP
		s.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
		s.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{}
		s.Status.Replicas, s.Status.ReadyReplicas = 3, 3
		return s
	}
	return want, served
}

// A StatefulSet as the API server returns it (defaults, status, a foreign
// label) against what a builder asks for: matches; one drifted field in the
// Pod template, one removed port, or one quantity changed does not.
func TestTypedSubsetOnAServedStatefulSet(t *testing.T) {
	want, served := servedStatefulSet(t)
	for _, tc := range []struct {
		name  string
		drift func(*appsv1.StatefulSet)
		match bool
	}{
		{"as served", func(*appsv1.StatefulSet) {}, true},
		{"image edited", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "celld:2" }, false},
		{"port removed", func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Ports = s.Spec.Template.Spec.Containers[0].Ports[:1]
		}, false},
		{"request changed", func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("200m")
		}, false},
		{"request written another way", func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("0.1")
		}, true},
		{"label removed", func(s *appsv1.StatefulSet) { delete(s.Labels, "app") }, false},
		{"replicas scaled", func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To(int32(5)) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := served()
			tc.drift(live)
			got, ok := typedSubset(want, live)
			require.True(t, ok)
			assert.Equal(t, tc.match, got)
			liveMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
			require.NoError(t, err)
			liveMap["apiVersion"], liveMap["kind"] = "apps/v1", "StatefulSet"
			assert.Equal(t, Subset(want, liveMap), got, "the conversion's answer")
		})
	}
}

func exactCopy(m map[string]any, _ *rand.Rand) map[string]any {
	return runtime.DeepCopyJSON(m)
}

// someFields keeps each map entry with probability 2/3; lists keep their
// length (Subset compares lists element by element).
func someFields(m map[string]any, rnd *rand.Rand) map[string]any {
	var pick func(v any) any
	pick = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range t {
				if rnd.Intn(3) > 0 {
					out[k] = pick(e)
				}
			}
			return out
		case []any:
			out := make([]any, len(t))
			for i, e := range t {
				out[i] = pick(e)
			}
			return out
		default:
			return t
		}
	}
	return pick(m).(map[string]any)
}

// leaves returns setters for every scalar in m, with its value.
func leaves(m map[string]any) (setters []func(any), values []any) {
	var walk func(v any, set func(any))
	walk = func(v any, set func(any)) {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				walk(e, func(n any) { t[k] = n })
			}
		case []any:
			for i, e := range t {
				walk(e, func(n any) { t[i] = n })
			}
		case nil:
		default:
			setters, values = append(setters, set), append(values, t)
		}
	}
	walk(m, nil)
	return setters, values
}

func oneLeafChanged(m map[string]any, rnd *rand.Rand) map[string]any {
	out := runtime.DeepCopyJSON(m)
	setters, values := leaves(out)
	if len(setters) == 0 {
		return out
	}
	i := rnd.Intn(len(setters))
	switch v := values[i].(type) {
	case string:
		setters[i](v + "x")
	case int64:
		setters[i](v + 1)
	case bool:
		setters[i](!v)
	case float64:
		setters[i](v + 1)
	}
	return out
}

// oneLeafRetyped writes one scalar as another type with the same text, or
// as a map or list: Subset compares scalars by their printed form.
func oneLeafRetyped(m map[string]any, rnd *rand.Rand) map[string]any {
	out := runtime.DeepCopyJSON(m)
	setters, values := leaves(out)
	if len(setters) == 0 {
		return out
	}
	i := rnd.Intn(len(setters))
	switch rnd.Intn(3) {
	case 0:
		setters[i](fmt.Sprint(values[i]))
	case 1:
		setters[i](map[string]any{})
	default:
		setters[i]([]any{values[i]})
	}
	return out
}

// oneFieldAdded adds a field live does not have to one map of want: an
// empty map (which Subset lets pass), or a map or a value (which it does
// not).
func oneFieldAdded(m map[string]any, rnd *rand.Rand) map[string]any {
	out := runtime.DeepCopyJSON(m)
	var maps []map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			maps = append(maps, t)
			for _, e := range t {
				walk(e)
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(out)
	target := maps[rnd.Intn(len(maps))]
	target["zzAdded"] = []any{map[string]any{}, map[string]any{"a": "b"}, "v"}[rnd.Intn(3)]
	return out
}

// oneNodeFlattened writes one map or list of want as a string: a shape the
// typed walk leaves to the conversion.
func oneNodeFlattened(m map[string]any, rnd *rand.Rand) map[string]any {
	out := runtime.DeepCopyJSON(m)
	var setters []func(any)
	var walk func(v any, set func(any))
	walk = func(v any, set func(any)) {
		switch t := v.(type) {
		case map[string]any:
			if set != nil {
				setters = append(setters, set)
			}
			for k, e := range t {
				walk(e, func(n any) { t[k] = n })
			}
		case []any:
			setters = append(setters, set)
			for i, e := range t {
				walk(e, func(n any) { t[i] = n })
			}
		}
	}
	walk(out, nil)
	if len(setters) > 0 {
		setters[rnd.Intn(len(setters))]("flat")
	}
	return out
}

// The comparison at a cold restart: every object once, with nothing to
// write. "converted" is what the Applier did before typedSubset.
func BenchmarkCompareServedStatefulSet(b *testing.B) {
	want, served := servedStatefulSet(b)
	live := served()
	b.Run("converted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			u, err := asUnstructured(live, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))
			if err != nil || !Subset(want, u.Object) {
				b.Fatal("no match")
			}
		}
	})
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if same, ok := typedSubset(want, live); !ok || !same {
				b.Fatal("no match")
			}
		}
	})
}

// randomFiller fills API objects at random, with valid quantities, ports,
// times and raw extensions (the converter needs them well formed). The seed
// is logged so that a failure can be replayed.
func randomFiller(t *testing.T) (*rand.Rand, *randfill.Filler) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewSource(seed))
	return rnd, randfill.New().RandSource(rnd).NilChance(0.3).NumElements(0, 2).MaxDepth(12).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = resource.MustParse([]string{"0", "1", "500m", "1Gi", "2.5", "100M"}[c.Intn(6)])
		},
		func(v *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*v = intstr.FromInt32(c.Int31n(70000))
			} else {
				*v = intstr.FromString([]string{"http", "peer", "25%"}[c.Intn(3)])
			}
		},
		func(tm *metav1.Time, c randfill.Continue) {
			*tm = metav1.Unix(c.Int63n(2_000_000_000), 0)
		},
		func(raw *runtime.RawExtension, c randfill.Continue) {
			raw.Raw = []byte(fmt.Sprintf(`{"n":%d}`, c.Intn(3)))
		},
	)
}

// convertCustom reads an IntOrString (or a pointer to one) directly; it must give what its
// MarshalJSON and the decode give, or refuse as they do.
func TestConvertCustomIntOrString(t *testing.T) {
	entry := value.TypeReflectEntryOf(reflect.TypeFor[intstr.IntOrString]())
	pointerEntry := value.TypeReflectEntryOf(reflect.TypeFor[*intstr.IntOrString]())
	for _, v := range []intstr.IntOrString{
		intstr.FromInt32(0), intstr.FromInt32(8080), intstr.FromInt32(-1), intstr.FromInt32(math.MaxInt32),
		intstr.FromString(""), intstr.FromString("http"), intstr.FromString("25%"), intstr.FromString("日本"),
		intstr.FromString("bad \xff"), {Type: 7, IntVal: 3},
	} {
		want, wantErr := entry.ToUnstructured(reflect.ValueOf(v))
		got, err := convertCustom(entry, reflect.ValueOf(v))
		assert.Equal(t, wantErr != nil, err != nil, "%#v", v)
		assert.Equal(t, want, got, "%#v", v)
		want, wantErr = pointerEntry.ToUnstructured(reflect.ValueOf(&v))
		got, err = convertCustom(pointerEntry, reflect.ValueOf(&v))
		assert.Equal(t, wantErr != nil, err != nil, "&%#v", v)
		assert.Equal(t, want, got, "&%#v", v)
	}
	got, err := convertCustom(pointerEntry, reflect.ValueOf((*intstr.IntOrString)(nil)))
	assert.NoError(t, err)
	assert.Nil(t, got)
}

// appliedKinds makes the kinds the operators apply, and Pods (the deepest
// core type) and Secrets ([]byte values), for the random-object tests.
var appliedKinds = []func() runtime.Object{
	func() runtime.Object { return &appsv1.StatefulSet{} },
	func() runtime.Object { return &corev1.Service{} },
	func() runtime.Object { return &corev1.ServiceAccount{} },
	func() runtime.Object { return &networkingv1.NetworkPolicy{} },
	func() runtime.Object { return &networkingv1.Ingress{} },
	func() runtime.Object { return &policyv1.PodDisruptionBudget{} },
	func() runtime.Object { return &corev1.Pod{} },
	func() runtime.Object { return &corev1.Secret{} }, // []byte values
}
