package apply

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOthersHold(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
	}
	spec := `{"f:spec":{"f:mtls":{"f:mode":{}}}}`
	labels := `{"f:metadata":{"f:labels":{"f:a":{}}}}`
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    bool
	}{
		{"no entries", nil, false},
		{"only the manager's applies", []metav1.ManagedFieldsEntry{entry("me", metav1.ManagedFieldsOperationApply, spec)}, false},
		{"someone else's labels", []metav1.ManagedFieldsEntry{entry("me", metav1.ManagedFieldsOperationApply, spec), entry("kubectl", metav1.ManagedFieldsOperationUpdate, labels)}, false},
		{"a hand edit of spec", []metav1.ManagedFieldsEntry{entry("me", metav1.ManagedFieldsOperationApply, spec), entry("kubectl", metav1.ManagedFieldsOperationUpdate, spec)}, true},
		{"another applier of spec", []metav1.ManagedFieldsEntry{entry("other", metav1.ManagedFieldsOperationApply, spec)}, true},
		{"the manager's own update (a restore)", []metav1.ManagedFieldsEntry{entry("me", metav1.ManagedFieldsOperationUpdate, spec)}, true},
		{"an unreadable entry", []metav1.ManagedFieldsEntry{entry("kubectl", metav1.ManagedFieldsOperationUpdate, `not json`)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{ManagedFields: tc.entries}
			if got := OthersHold(obj, "me", "spec"); got != tc.want {
				t.Fatalf("OthersHold = %v, want %v", got, tc.want)
			}
		})
	}
}
