package apply

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OthersHold reports whether any field of obj under the top-level field
// (e.g. "spec") is held by a writer other than manager's server-side
// applies: a hand edit, another controller, or an update manager made
// itself. Server-side apply leaves such fields in place when the manager
// applies without them, so a writer that must own the whole field has to
// replace it first. An entry that cannot be read counts as held.
func OthersHold(obj metav1.Object, manager, field string) bool {
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager == manager && mf.Operation == metav1.ManagedFieldsOperationApply {
			continue
		}
		if mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			return true
		}
		if _, ok := fields["f:"+field]; ok {
			return true
		}
	}
	return false
}
