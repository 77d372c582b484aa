package apply

import (
	"encoding/json"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"
)

// The applied-hash annotation of every object already applied is a hash of
// Marshal's bytes: appendJSON must write the very same ones, or an upgrade
// would re-apply every object once.
func TestAppendJSONIsMarshal(t *testing.T) {
	tricky := []any{
		"", "plain", `quote " backslash \ slash /`, "<script>&amp;</script>", "\b\f\n\r\t\x00\x01\x1f\x7f",
		"é ü 日本 🙂", "\u2028\u2029", "bad \xff utf-8 \xc3", string([]byte{0xed, 0xa0, 0x80}),
		int64(0), int64(-1), int64(math.MaxInt64), int64(math.MinInt64),
		0.0, math.Copysign(0, -1), 1.5, 1e-6, 9.99e-7, 1e20, 1e21, 123456789.125, -3e-9, math.SmallestNonzeroFloat64, math.MaxFloat64,
		true, false, nil, map[string]any{}, []any{}, map[string]any(nil), []any(nil),
		map[string]any{"b": int64(1), "a": []any{"x", nil, map[string]any{"<": "&"}}, "": "empty key", "é": 2.5},
		int32(7), "json.Number", json.Number("12"), // outside the converter's types: Marshal's own
	}
	for _, v := range tricky {
		want, err := json.Marshal(v)
		require.NoError(t, err)
		got, err := appendJSON(nil, v)
		require.NoError(t, err)
		require.Equalf(t, string(want), string(got), "%#v", v)
	}
	_, err := appendJSON(nil, math.Inf(1))
	require.Error(t, err, "Marshal refuses infinities")

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	fill := randfill.New().RandSource(rand.New(rand.NewSource(seed))).NilChance(0.2).NumElements(0, 3).MaxDepth(10)
	for _, newObj := range []func() runtime.Object{
		func() runtime.Object { return &appsv1.StatefulSet{} },
		func() runtime.Object { return &corev1.Service{} },
		func() runtime.Object { return &networkingv1.NetworkPolicy{} },
		func() runtime.Object { return &corev1.ConfigMap{} },
	} {
		for range 100 {
			obj := newObj()
			fill.Fill(obj)
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				continue
			}
			want, err := json.Marshal(m)
			require.NoError(t, err)
			got, err := appendJSON(nil, m)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		}
	}
}

func BenchmarkHashOfServedStatefulSet(b *testing.B) {
	want, _ := servedStatefulSet(b)
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(want); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := hashOf(want); err != nil {
				b.Fatal(err)
			}
		}
	})
}
