package apply

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Random desired objects of the kinds the operators apply, each hashed
// and compared by the walks and by the unstructured path, against live
// objects that are the desired one, a mix of it and another at every depth,
// or another altogether.
func TestDesiredWalksAgreeWithConversion(t *testing.T) {
	rnd, fill := randomFiller(t)
	var hashed, compared, matched, fellBack int
	for _, newObj := range appliedKinds {
		for range 120 {
			desired := newObj()
			fill.Fill(desired)
			if _, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired); err != nil {
				continue
			}
			want, err := desiredContent(desired.(client.Object))
			require.NoError(t, err)
			wantHash, err := hashOf(want)
			require.NoError(t, err)
			hash, ok, err := hashDesired(desired)
			require.NoError(t, err)
			require.True(t, ok, "%T: the hash walk gave up", desired)
			require.Equalf(t, wantHash, hash, "%T: the hash walk differs from hashOf over the conversion\n%v", desired, want)
			hashed++

			other := newObj()
			fill.Fill(other)
			for _, live := range []runtime.Object{desired.DeepCopyObject(), mixed(desired, other, rnd), mixed(desired, other, rnd), other} {
				liveMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
				if err != nil {
					continue
				}
				liveMap["apiVersion"], liveMap["kind"] = want["apiVersion"], want["kind"]
				expected := Subset(want, liveMap)
				got, ok := matchDesired(desired, live)
				compared++
				if !ok {
					fellBack++
					continue
				}
				require.Equalf(t, expected, got, "%T: the match walk differs from Subset over the conversion\nwant: %v\nlive: %v", desired, want, liveMap)
				if got {
					matched++
				}
			}
		}
	}
	t.Logf("%d hashed; %d compared, %d matched, %d fell back", hashed, compared, matched, fellBack)
	assert.Greater(t, matched, compared/5, "too few matching cases to mean anything")
	assert.Less(t, fellBack, compared/20, "the walk should answer nearly every case itself")
}

// mixed is a copy of d in which, at every depth, some fields, elements and
// entries come from o instead.
func mixed(d, o runtime.Object, rnd *rand.Rand) runtime.Object {
	out := d.DeepCopyObject()
	mix(reflect.ValueOf(out).Elem(), reflect.ValueOf(o.DeepCopyObject()).Elem(), rnd)
	return out
}

func mix(dst, src reflect.Value, rnd *rand.Rand) {
	switch dst.Kind() {
	case reflect.Struct:
		for i := 0; i < dst.NumField(); i++ {
			if !dst.Field(i).CanSet() {
				return // a type with unexported state (Quantity): keep it whole
			}
		}
		for i := 0; i < dst.NumField(); i++ {
			switch rnd.Intn(4) {
			case 0:
				dst.Field(i).Set(src.Field(i))
			case 1:
				mix(dst.Field(i), src.Field(i), rnd)
			}
		}
	case reflect.Pointer:
		if !dst.IsNil() && !src.IsNil() {
			mix(dst.Elem(), src.Elem(), rnd)
		} else if rnd.Intn(4) == 0 {
			dst.Set(src)
		}
	case reflect.Slice:
		if dst.Len() == src.Len() && dst.Type().Elem().Kind() != reflect.Uint8 {
			for i := 0; i < dst.Len(); i++ {
				mix(dst.Index(i), src.Index(i), rnd)
			}
		} else if rnd.Intn(4) == 0 {
			dst.Set(src)
		}
	case reflect.Map:
		if dst.IsNil() || src.IsNil() {
			if rnd.Intn(4) == 0 {
				dst.Set(src)
			}
			return
		}
		iter := src.MapRange()
		for iter.Next() {
			if rnd.Intn(3) == 0 {
				dst.SetMapIndex(iter.Key(), iter.Value())
			}
		}
	default:
		if rnd.Intn(4) == 0 {
			dst.Set(src)
		}
	}
}

func BenchmarkDesiredServedStatefulSet(b *testing.B) {
	want, served := servedStatefulSet(b)
	_ = want
	desired := served()
	desired.Status = appsv1.StatefulSetStatus{}
	live := served()
	b.Run("convert, hash, compare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
			if err != nil {
				b.Fatal(err)
			}
			pruneNulls(m)
			delete(m, "status")
			if _, err := hashOf(m); err != nil {
				b.Fatal(err)
			}
			if same, ok := typedSubset(m, live); !ok || !same {
				b.Fatal("no match")
			}
		}
	})
	b.Run("walks", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := hashDesired(desired); !ok || err != nil {
				b.Fatal("no hash")
			}
			if same, ok := matchDesired(desired, live); !ok || !same {
				b.Fatal("no match")
			}
		}
	})
}
