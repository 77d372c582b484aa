package netpol

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// alternatives is a list of selectors whose union, under cyclonus' rules,
// selects what sel selects under Kubernetes' rules (see normalize). A nil
// selector stays nil: it means "not set", which is not "everything".
func alternatives(sel *metav1.LabelSelector) []*metav1.LabelSelector {
	if sel == nil {
		return []*metav1.LabelSelector{nil}
	}
	base := &metav1.LabelSelector{}
	for _, k := range slices.Sorted(maps.Keys(sel.MatchLabels)) {
		v := sel.MatchLabels[k]
		if v == "" {
			base.MatchExpressions = append(base.MatchExpressions,
				metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{""}})
			continue
		}
		if base.MatchLabels == nil {
			base.MatchLabels = map[string]string{}
		}
		base.MatchLabels[k] = v
	}
	out := []*metav1.LabelSelector{base}
	for _, e := range sel.MatchExpressions {
		var next []*metav1.LabelSelector
		for _, s := range out {
			if e.Operator != metav1.LabelSelectorOpNotIn {
				c := s.DeepCopy()
				c.MatchExpressions = append(c.MatchExpressions, *e.DeepCopy())
				next = append(next, c)
				continue
			}
			absent := s.DeepCopy()
			absent.MatchExpressions = append(absent.MatchExpressions, metav1.LabelSelectorRequirement{Key: e.Key, Operator: metav1.LabelSelectorOpDoesNotExist})
			present := s.DeepCopy()
			present.MatchExpressions = append(present.MatchExpressions, *e.DeepCopy())
			next = append(next, absent, present)
		}
		out = next
	}
	return out
}
