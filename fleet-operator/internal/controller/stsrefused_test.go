package controller

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestStatefulSetRefused: only an answer that judges the StatefulSet
// itself (admission, RBAC, the schema) on the StatefulSet step is a
// refusal; a transient failure, or another step's refusal, is not.
func TestStatefulSetRefused(t *testing.T) {
	sts := schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	denied := apierrors.NewForbidden(sts, "a", errors.New("ValidatingAdmissionPolicy 'p' denied request: no"))
	for _, tc := range []struct {
		name string
		obs  *observed
		want string
	}{
		{"no failure", &observed{}, ""},
		{"admission refused the StatefulSet", &observed{failed: &stepError{step: stepStatefulSet, err: fmt.Errorf("applying StatefulSet ns/a: %w", denied)}},
			`statefulsets.apps "a" is forbidden: ValidatingAdmissionPolicy 'p' denied request: no`},
		{"the schema refused it", &observed{failed: &stepError{step: stepStatefulSet, err: apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, "a", nil)}},
			`StatefulSet.apps "a" is invalid`},
		{"the API server unavailable", &observed{failed: &stepError{step: stepStatefulSet, err: apierrors.NewServiceUnavailable("etcd")}}, ""},
		{"a conflict", &observed{failed: &stepError{step: stepStatefulSet, err: apierrors.NewConflict(sts, "a", errors.New("changed"))}}, ""},
		{"another step refused", &observed{failed: &stepError{step: "routing", err: denied}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, statefulSetRefused(tc.obs))
		})
	}
}
