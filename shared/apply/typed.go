package apply

import (
	"encoding/base64"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// typedSubset answers Subset(want, ToUnstructured(obj)) for a typed object
// without converting it: it walks only the fields want sets. Converting a
// cached StatefulSet converts every server default of its Pod template, and
// a restarted operator compares every object it owns once. It answers where
// desired is not walked itself (unstructured, see matchDesired) or where
// matchDesired gives up.
//
// It follows runtime.DefaultUnstructuredConverter's rules (field names and
// omitempty/omitzero from json tags, embedded structs inlined, custom
// converters for Quantity, Time, IntOrString ...). Where a shape falls
// outside what it mirrors exactly, ok is false and the caller converts;
// TestTypedSubsetAgreesWithConversion holds the two answers equal.
// apiVersion and kind are not compared: typed objects from a cache carry no
// TypeMeta, and the caller reads the object as desired's kind.
func typedSubset(want map[string]any, obj runtime.Object) (match, ok bool) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false, false
	}
	return subsetStruct(want, v.Elem(), true)
}

func subsetValue(want any, sv reflect.Value) (match, ok bool) {
	if entry := value.TypeReflectEntryOf(sv.Type()); entry.CanConvertToUnstructured() {
		u, err := convertCustom(entry, sv)
		if err != nil {
			return false, false
		}
		return Subset(want, u), true
	}
	switch sv.Kind() {
	case reflect.String:
		if w, isString := want.(string); isString {
			return w == sv.String(), true
		}
		return Subset(want, sv.String()), true
	case reflect.Bool:
		if w, isBool := want.(bool); isBool {
			return w == sv.Bool(), true
		}
		return Subset(want, sv.Bool()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if w, isInt := want.(int64); isInt {
			return w == sv.Int(), true
		}
		return Subset(want, sv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u := sv.Uint()
		if u > uint64(1<<63-1) {
			return false, false // the converter refuses it
		}
		return Subset(want, int64(u)), true
	case reflect.Float32, reflect.Float64:
		return Subset(want, sv.Float()), true
	case reflect.Pointer, reflect.Interface:
		if sv.IsNil() {
			return Subset(want, nil), true
		}
		return subsetValue(want, sv.Elem())
	case reflect.Map:
		if sv.IsNil() {
			return Subset(want, nil), true
		}
		w, isMap := want.(map[string]any)
		if !isMap || sv.Type().Key().Kind() != reflect.String {
			return false, false
		}
		keyType := sv.Type().Key()
		for k, wv := range w {
			lv := sv.MapIndex(reflect.ValueOf(k).Convert(keyType))
			if m, ok := subsetEntry(wv, lv, lv.IsValid()); !ok || !m {
				return m, ok
			}
		}
		return true, true
	case reflect.Slice:
		if sv.IsNil() {
			return Subset(want, nil), true
		}
		if sv.Type().Elem().Kind() == reflect.Uint8 {
			return Subset(want, base64.StdEncoding.EncodeToString(sv.Bytes())), true
		}
		w, isList := want.([]any)
		if !isList {
			return false, false
		}
		if len(w) != sv.Len() {
			return false, true
		}
		for i := range w {
			if m, ok := subsetValue(w[i], sv.Index(i)); !ok || !m {
				return m, ok
			}
		}
		return true, true
	case reflect.Struct:
		w, isMap := want.(map[string]any)
		if !isMap {
			return false, false
		}
		return subsetStruct(w, sv, false)
	default:
		return false, false
	}
}

func subsetStruct(want map[string]any, sv reflect.Value, skipTypeMeta bool) (match, ok bool) {
	for k, wv := range want {
		if skipTypeMeta && (k == "apiVersion" || k == "kind") {
			continue
		}
		lv, present, ok := structField(sv, k)
		if !ok {
			return false, false
		}
		if m, ok := subsetEntry(wv, lv, present); !ok || !m {
			return m, ok
		}
	}
	return true, true
}

// subsetEntry is Subset for one entry of a map or struct, lv the live
// value where the live side has the key.
func subsetEntry(want any, lv reflect.Value, present bool) (match, ok bool) {
	if !present {
		return missingMatches(want), true
	}
	return subsetValue(want, lv)
}

// missingMatches is Subset's rule for a field live does not have: only an
// empty map in want matches it (the server omits empty structs).
func missingMatches(want any) bool {
	m, isMap := want.(map[string]any)
	return isMap && len(m) == 0
}
