package apply

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// A typed desired object is hashed and compared as it is, without the
// unstructured copy the write needs: most applies write nothing, and at a
// cold restart every object is compared once (issue #20: converting both
// sides, copying the cached one and hashing through encoding/json took
// 0.8-1.0 s of CPU in the first pass over 1,000 fleets). Both walks give exactly
// what the unstructured path gives for the converter's output with nulls
// pruned and status dropped (TestDesiredWalksAgreeWithConversion): the
// applied-hash annotations written before them stay valid. Where a shape
// falls outside what they mirror, ok is false and the caller converts.

// hashDesired is hashOf over the desired object's unstructured form.
func hashDesired(desired runtime.Object) (hash string, ok bool, err error) {
	if !walkable(desired) {
		return "", false, nil
	}
	v := reflect.ValueOf(desired)
	buf := hashBuffers.Get().(*[]byte)
	defer hashBuffers.Put(buf)
	b, ok, err := appendStruct((*buf)[:0], v.Elem(), true, true)
	if err != nil || !ok {
		return "", ok, err
	}
	*buf = b
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), true, nil
}

// matchDesired is Subset(desired's unstructured form, live's) for a live
// object of desired's own Go type, without converting either.
func matchDesired(desired, live runtime.Object) (match, ok bool) {
	dv, lv := reflect.ValueOf(desired), reflect.ValueOf(live)
	if !walkable(desired) || dv.Type() != lv.Type() || lv.IsNil() {
		return false, false
	}
	return matchStruct(dv.Elem(), lv.Elem(), true, true)
}

// walkable: a pointer to a plain struct; not unstructured content, not a
// type with a converter of its own.
func walkable(obj runtime.Object) bool {
	if _, isUnstructured := obj.(runtime.Unstructured); isUnstructured {
		return false
	}
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct &&
		!value.TypeReflectEntryOf(v.Type()).CanConvertToUnstructured()
}

// The pruning of nulls reaches what pruneNulls reaches: every map on a
// path of maps from the root, and maps that are elements of such a map's
// lists, but nothing under a list inside a list. prune says whether the
// value at hand is in that reach; inList whether it is a list's element.

func childPrune(prune, inList bool) bool { return prune && !inList }

func appendValue(b []byte, v reflect.Value, prune, inList bool) ([]byte, bool, error) {
	if entry := value.TypeReflectEntryOf(v.Type()); entry.CanConvertToUnstructured() {
		u, err := convertCustom(entry, v)
		if err != nil {
			return nil, false, nil // the conversion reports it
		}
		b, err = appendJSON(b, pruneValue(u, prune, inList))
		return b, err == nil, err
	}
	switch v.Kind() {
	case reflect.String:
		return appendString(b, v.String()), true, nil
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool()), true, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10), true, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.Uint() > uint64(1<<63-1) {
			return nil, false, nil
		}
		return strconv.AppendInt(b, int64(v.Uint()), 10), true, nil
	case reflect.Float32, reflect.Float64:
		b, err := appendFloat(b, v.Float())
		return b, err == nil, err
	case reflect.Pointer:
		if v.IsNil() {
			return append(b, "null"...), true, nil
		}
		return appendValue(b, v.Elem(), prune, inList)
	case reflect.Map:
		if v.IsNil() {
			return append(b, "null"...), true, nil
		}
		if v.Type().Key().Kind() != reflect.String {
			return nil, false, nil
		}
		if v.Type() == stringMapType { // labels, annotations, selectors
			return appendStringMap(b, v.Interface().(map[string]string)), true, nil
		}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(x.String(), y.String()) })
		b = append(b, '{')
		first := true
		for _, k := range keys {
			e := v.MapIndex(k)
			var ok bool
			var err error
			if b, first, ok, err = appendEntry(b, first, k.String(), e, prune); !ok || err != nil {
				return nil, ok, err
			}
		}
		return append(b, '}'), true, nil
	case reflect.Slice:
		if v.IsNil() {
			return append(b, "null"...), true, nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return appendString(b, base64.StdEncoding.EncodeToString(v.Bytes())), true, nil
		}
		b = append(b, '[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			var err error
			if b, ok, err = appendValue(b, v.Index(i), childPrune(prune, inList), true); !ok || err != nil {
				return nil, ok, err
			}
		}
		return append(b, ']'), true, nil
	case reflect.Struct:
		return appendStruct(b, v, prune, false)
	default: // interfaces (whose dynamic types vary) and what the converter refuses
		return nil, false, nil
	}
}

var stringMapType = reflect.TypeFor[map[string]string]()

func appendStringMap(b []byte, m map[string]string) []byte {
	keys := keysPool.Get().(*[]string)
	*keys = (*keys)[:0]
	for k := range m {
		*keys = append(*keys, k)
	}
	slices.Sort(*keys)
	b = append(b, '{')
	for i, k := range *keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	keysPool.Put(keys)
	return append(b, '}')
}

func appendStruct(b []byte, v reflect.Value, prune, root bool) ([]byte, bool, error) {
	plan := planOf(v.Type())
	if !plan.supported {
		return nil, false, nil
	}
	b = append(b, '{')
	first := true
	for i := range plan.keys {
		k := &plan.keys[i]
		if root && k.name == "status" {
			continue // the Applier drops it
		}
		fv, present := k.resolve(v)
		if !present {
			continue
		}
		var ok bool
		var err error
		if b, first, ok, err = appendEntry(b, first, k.name, fv, prune); !ok || err != nil {
			return nil, ok, err
		}
	}
	return append(b, '}'), true, nil
}

func matchValue(dv, lv reflect.Value, prune, inList bool) (match, ok bool) {
	if entry := value.TypeReflectEntryOf(dv.Type()); entry.CanConvertToUnstructured() {
		u, err := convertCustom(entry, dv)
		if err != nil {
			return false, false
		}
		return subsetValue(pruneValue(u, prune, inList), lv)
	}
	// dv and lv are of one type, so scalars compare as they are (Subset
	// compares printed forms, which for these is the same).
	switch dv.Kind() {
	case reflect.String:
		return dv.String() == lv.String(), true
	case reflect.Bool:
		return dv.Bool() == lv.Bool(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return dv.Int() == lv.Int(), true
	case reflect.Float32, reflect.Float64: // -0 and NaN print otherwise than they compare
		return subsetValue(dv.Float(), lv)
	case reflect.Pointer:
		if dv.IsNil() || lv.IsNil() {
			return matchConverted(dv, lv, prune, inList)
		}
		return matchValue(dv.Elem(), lv.Elem(), prune, inList)
	case reflect.Map:
		if dv.IsNil() || lv.IsNil() || dv.Type().Key().Kind() != reflect.String {
			return matchConverted(dv, lv, prune, inList)
		}
		if dv.Type() == stringMapType { // labels, annotations, selectors
			live := lv.Interface().(map[string]string)
			for k, d := range dv.Interface().(map[string]string) {
				if l, found := live[k]; !found || l != d {
					return false, true
				}
			}
			return true, true
		}
		iter := dv.MapRange()
		for iter.Next() {
			le := lv.MapIndex(iter.Key())
			if m, ok := matchEntry(iter.Value(), le, le.IsValid(), prune); !ok || !m {
				return m, ok
			}
		}
		return true, true
	case reflect.Slice:
		if dv.IsNil() || lv.IsNil() || dv.Type().Elem().Kind() == reflect.Uint8 {
			return matchConverted(dv, lv, prune, inList)
		}
		if dv.Len() != lv.Len() {
			return false, true
		}
		for i := 0; i < dv.Len(); i++ {
			if m, ok := matchValue(dv.Index(i), lv.Index(i), childPrune(prune, inList), true); !ok || !m {
				return m, ok
			}
		}
		return true, true
	case reflect.Struct:
		return matchStruct(dv, lv, prune, false)
	default: // unsigned integers, interfaces, what the converter refuses
		return matchConverted(dv, lv, prune, inList)
	}
}

func matchStruct(dv, lv reflect.Value, prune, root bool) (match, ok bool) {
	plan := planOf(dv.Type())
	if !plan.supported {
		return false, false
	}
	for i := range plan.keys {
		k := &plan.keys[i]
		if root && (k.name == "status" || k.name == "apiVersion" || k.name == "kind") {
			continue // status is dropped; the live object is read as desired's kind
		}
		fv, present := k.resolve(dv)
		if !present {
			continue
		}
		le, livePresent := k.resolve(lv)
		if m, ok := matchEntry(fv, le, livePresent, prune); !ok || !m {
			return m, ok
		}
	}
	return true, true
}

// written says whether a map entry or struct field with value v is
// written: in pruneNulls' reach, not when the converter writes null.
func written(v reflect.Value, prune bool) (yes, ok bool) {
	if !prune {
		return true, true
	}
	isNull, ok := convertsToNull(v)
	return !isNull, ok
}

// appendEntry appends `"name":value` to an object that has had entries
// before unless first, and says whether the next one is still the first.
func appendEntry(b []byte, first bool, name string, v reflect.Value, prune bool) ([]byte, bool, bool, error) {
	if yes, ok := written(v, prune); !ok || !yes {
		return b, first, ok, nil
	}
	if !first {
		b = append(b, ',')
	}
	b = appendString(b, name)
	b = append(b, ':')
	b, ok, err := appendValue(b, v, prune, false)
	return b, false, ok, err
}

// matchEntry is Subset for one entry of a map or struct: d the desired
// value, l the live one where the live side has the key.
func matchEntry(d, l reflect.Value, livePresent, prune bool) (match, ok bool) {
	if yes, ok := written(d, prune); !ok || !yes {
		return ok, ok // an entry not written asks nothing of live
	}
	if !livePresent {
		return missingConverted(d, prune)
	}
	return matchValue(d, l, prune, false)
}

// matchConverted is the exact answer for a shape the walk does not
// mirror: the desired value converted alone, against the live value.
func matchConverted(dv, lv reflect.Value, prune, inList bool) (match, ok bool) {
	u, err := convertValue(dv)
	if err != nil {
		return false, false
	}
	return subsetValue(pruneValue(u, prune, inList), lv)
}

// missingConverted is Subset's rule for a desired field live lacks.
func missingConverted(dv reflect.Value, prune bool) (match, ok bool) {
	u, err := convertValue(dv)
	if err != nil {
		return false, false
	}
	return missingMatches(pruneValue(u, prune, false)), true
}

// convertsToNull says whether the converter writes null for v, which
// pruneNulls then drops.
func convertsToNull(v reflect.Value) (isNull, ok bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		// A nil pointer is null with or without a converter of its type;
		// the converter of a pointer type converts what it points to.
		if v.IsNil() {
			return true, true
		}
		return convertsToNull(v.Elem())
	}
	if entry := value.TypeReflectEntryOf(v.Type()); entry.CanConvertToUnstructured() {
		u, err := convertCustom(entry, v)
		return u == nil, err == nil
	}
	switch v.Kind() {
	case reflect.Map, reflect.Slice:
		return v.IsNil(), true
	}
	return false, true
}

// pruneValue drops nulls from a converted value as pruneNulls does where
// the value sits: a list that is another list's element is not reached.
func pruneValue(u any, prune, inList bool) any {
	if !prune {
		return u
	}
	switch t := u.(type) {
	case map[string]any:
		pruneNulls(t)
	case []any:
		if inList {
			return u
		}
		for _, e := range t {
			if m, isMap := e.(map[string]any); isMap {
				pruneNulls(m)
			}
		}
	}
	return u
}
