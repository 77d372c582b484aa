package apply

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// How runtime.DefaultUnstructuredConverter lays out a typed value, for the
// walks of typed.go and desired.go: which key a struct field is written
// under and when it is left out, and what a type with a converter of its
// own becomes.

// structField finds the value the converter would write under name for the
// struct sv: present is false when the converter would leave the key out.
func structField(sv reflect.Value, name string) (v reflect.Value, present, ok bool) {
	plan := planOf(sv.Type())
	if !plan.supported {
		return reflect.Value{}, false, false
	}
	i, found := plan.byName[name]
	if !found {
		return reflect.Value{}, false, true
	}
	v, present = plan.keys[i].resolve(sv)
	return v, present, true
}

type fieldInfo struct {
	index     int
	name      string
	inline    bool
	omitempty bool
	omitzero  func(reflect.Value) bool
}

type structInfo struct {
	fields    []fieldInfo
	supported bool
}

var structInfos sync.Map // reflect.Type → structInfo

// structFields reads sv's json tags the way the converter does (its
// fieldInfoFromField): no tag or an empty name means the Go field name,
// except on an embedded field, which is inlined; "-" is skipped.
func structFields(t reflect.Type) ([]fieldInfo, bool) {
	if cached, found := structInfos.Load(t); found {
		info := cached.(structInfo)
		return info.fields, info.supported
	}
	info := structInfo{supported: true}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		f := fieldInfo{index: i}
		tag, _ := sf.Tag.Lookup("json")
		items := strings.Split(tag, ",")
		f.name = items[0]
		for _, item := range items[1:] {
			switch item {
			case "omitempty":
				f.omitempty = true
			case "omitzero":
				f.omitzero = value.OmitZeroFunc(sf.Type)
			case "embed":
				info.supported = false // inlined from Go 1.27 on; not mirrored
			}
		}
		switch {
		case f.name == "-":
			continue
		case f.name == "" && sf.Anonymous:
			f.inline = true
		case f.name == "":
			f.name = sf.Name
		}
		info.fields = append(info.fields, f)
	}
	structInfos.Store(t, info)
	return info.fields, info.supported
}

// isEmpty is the converter's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Map, reflect.Slice:
		return v.IsNil() || v.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// A keyPlan is one key the converter may write for a struct type, with
// the fields (through embedded structs) that can supply it, in field order:
// the last one not omitted wins, as the converter writes them in order into
// one map.
type keyPlan struct {
	name  string
	paths [][]fieldStep
}

type fieldStep struct {
	index     int
	omitempty bool
	omitzero  func(reflect.Value) bool
	inline    bool
}

type structPlan struct {
	keys      []keyPlan // sorted by name, as Marshal writes them
	byName    map[string]int
	supported bool
}

var structPlans sync.Map // reflect.Type → *structPlan

// planOf reads t's json tags the way the converter does (see structFields).
func planOf(t reflect.Type) *structPlan {
	if cached, found := structPlans.Load(t); found {
		return cached.(*structPlan)
	}
	plan := &structPlan{byName: map[string]int{}, supported: true}
	var walk func(t reflect.Type, prefix []fieldStep)
	walk = func(t reflect.Type, prefix []fieldStep) {
		fields, supported := structFields(t)
		if !supported {
			plan.supported = false
			return
		}
		for _, f := range fields {
			path := append(slices.Clip(prefix), fieldStep{index: f.index, omitempty: f.omitempty, omitzero: f.omitzero, inline: f.inline})
			if f.inline {
				ft := t.Field(f.index).Type
				if value.TypeReflectEntryOf(ft).CanConvertToUnstructured() {
					plan.supported = false
					return
				}
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() != reflect.Struct || value.TypeReflectEntryOf(ft).CanConvertToUnstructured() {
					plan.supported = false
					return
				}
				walk(ft, path)
				continue
			}
			i, found := plan.byName[f.name]
			if !found {
				i = len(plan.keys)
				plan.byName[f.name] = i
				plan.keys = append(plan.keys, keyPlan{name: f.name})
			}
			plan.keys[i].paths = append(plan.keys[i].paths, path)
		}
	}
	walk(t, nil)
	slices.SortFunc(plan.keys, func(x, y keyPlan) int { return strings.Compare(x.name, y.name) })
	for i, k := range plan.keys {
		plan.byName[k.name] = i
	}
	structPlans.Store(t, plan)
	return plan
}

// resolve returns the value the converter writes under k for the struct
// v; present is false when it writes none.
func (k *keyPlan) resolve(v reflect.Value) (fv reflect.Value, present bool) {
	for i := len(k.paths) - 1; i >= 0; i-- {
		if fv, ok := follow(v, k.paths[i]); ok {
			return fv, true
		}
	}
	return reflect.Value{}, false
}

func follow(v reflect.Value, path []fieldStep) (reflect.Value, bool) {
	for _, step := range path {
		fv := v.Field(step.index)
		if step.omitempty && isEmpty(fv) || step.omitzero != nil && step.omitzero(fv) {
			return reflect.Value{}, false
		}
		if step.inline && fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				return reflect.Value{}, false
			}
			fv = fv.Elem()
		}
		v = fv
	}
	return v, true
}

// convertCustom is entry.ToUnstructured(v) for a type with a converter of
// its own. An IntOrString (every port of a NetworkPolicy or Service, by
// value or by pointer)
// converts through its MarshalJSON and a JSON decode; its value is read
// directly instead: the int as int64, or a string that is valid UTF-8
// (Marshal would replace what is not).
func convertCustom(entry *value.TypeReflectCacheEntry, v reflect.Value) (any, error) {
	if v.Type() == intOrStringPointerType { // a NetworkPolicy port
		if v.IsNil() {
			return nil, nil
		}
		v = v.Elem()
	}
	if v.Type() == intOrStringType {
		switch intstr.Type(v.Field(0).Int()) {
		case intstr.Int:
			return v.Field(1).Int(), nil
		case intstr.String:
			if s := v.Field(2).String(); utf8.ValidString(s) {
				return s, nil
			}
		}
	}
	return entry.ToUnstructured(v)
}

var (
	intOrStringType        = reflect.TypeFor[intstr.IntOrString]()
	intOrStringPointerType = reflect.TypeFor[*intstr.IntOrString]()
)

// convertValue converts one value alone with the converter, as the single
// field of a struct made for it.
func convertValue(v reflect.Value) (any, error) {
	if !v.CanInterface() {
		return nil, fmt.Errorf("apply: cannot convert %s", v.Type())
	}
	holder, _ := holderTypes.Load(v.Type())
	if holder == nil {
		holder = reflect.StructOf([]reflect.StructField{{Name: "V", Type: v.Type(), Tag: `json:"v"`}})
		holderTypes.Store(v.Type(), holder)
	}
	h := reflect.New(holder.(reflect.Type))
	h.Elem().Field(0).Set(v)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(h.Interface())
	if err != nil {
		return nil, err
	}
	return m["v"], nil
}

var holderTypes sync.Map // reflect.Type → the struct type convertValue wraps it in
