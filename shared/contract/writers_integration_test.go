//go:build integration

package contract

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// writerOf maps the field managers of this test to the contract's writers.
func writerOf(manager string) (Writer, bool) {
	switch {
	case manager == "kubectl-label":
		return Admin, true
	case manager == "mesh-operator":
		return MeshOperator, true
	case strings.HasPrefix(manager, "fleet-operator/"):
		return WorkloadOperator, true
	}
	return "", false
}

// version is one state of the namespace as a watch saw it.
type version struct {
	rv     string
	labels map[string]string
	held   map[string][]string // label key -> managers holding it
}

func heldLabels(ns *corev1.Namespace) map[string][]string {
	out := map[string][]string{}
	for _, mf := range ns.ManagedFields {
		for _, k := range labelsInFields(mf) {
			out[k] = append(out[k], mf.Manager)
		}
	}
	return out
}

func labelsInFields(mf metav1.ManagedFieldsEntry) []string {
	one := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{mf}}}
	mf.Operation = metav1.ManagedFieldsOperationApply
	one.ManagedFields[0] = mf
	return LabelsHeldBy(one, mf.Manager)
}

// TestWritersAtOnce: an admin, three fleets (auto, enabled, disabled) and
// the mesh operator write one namespace's labels at the same time, each
// through ApplyLabels as the operators do (the admin with kubectl's plain
// patch). Whatever the interleaving, once the admin's disabled is in place
// no version of the namespace carries another request value, the final
// labels are the contract's answer (disabled, nothing enrolled), every
// governed label of every version is a value the table lists held only by
// writers the table allows, and the namespace settles in a bounded number
// of writes.
func TestWritersAtOnce(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	env := testenv.Start(t, s)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: s})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for round := 0; round < 5; round++ {
		name := fmt.Sprintf("contested-%d", round)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		require.NoError(t, wc.Create(ctx, ns))
		w, err := wc.Watch(ctx, &corev1.NamespaceList{}, client.MatchingFields{"metadata.name": name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: ns.ResourceVersion}})
		require.NoError(t, err)
		var versions []version
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev := range w.ResultChan() {
				if ev.Type != watch.Modified {
					continue
				}
				n := ev.Object.(*corev1.Namespace)
				versions = append(versions, version{rv: n.ResourceVersion, labels: n.Labels, held: heldLabels(n)})
			}
		}()

		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		loop := func(f func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 15; i++ {
					if err := f(); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		fresh := func() (*corev1.Namespace, error) {
			n := &corev1.Namespace{}
			return n, wc.Get(ctx, types.NamespacedName{Name: name}, n)
		}
		fleetLoop := func(fleet string, asks bool) func() error {
			return func() error {
				n, err := fresh()
				if err != nil {
					return err
				}
				st, _ := Parse(n.Labels)
				want := map[string]string{}
				if asks { // auto and enabled ask; disabled declares nothing
					want, err = Declaration{Enroll: true, Edges: edgesIf(st.Enrolled)}.Labels(name)
					if err != nil {
						return err
					}
				}
				_, err = ApplyLabels(ctx, wc, wc, WorkloadOperator, FieldManager("fleet-operator", "fleet/"+name+"/"+fleet), n, want)
				return err
			}
		}
		loop(fleetLoop("auto", true))
		loop(fleetLoop("enabled", true))
		loop(fleetLoop("disabled", false))
		loop(func() error { // the mesh operator, with the namespace in spec.enrollNamespaces
			n, err := fresh()
			if err != nil {
				return err
			}
			st, _ := Parse(n.Labels)
			want := map[string]string{}
			if st.Request != RequestDisabled {
				want, err = Enrollment{Ambient, MTLSStrict, IsolationNamespace, "istio-system"}.StateLabels()
				if err != nil {
					return err
				}
				want[labels.Mesh] = labels.MeshEnabled
				want[labels.IstioDataPlaneMode] = string(Ambient)
			}
			_, err = ApplyLabels(ctx, wc, wc, MeshOperator, "mesh-operator", n, want)
			return err
		})
		var adminRV string
		wg.Add(1)
		go func() { // the admin, once, somewhere in the middle
			defer wg.Done()
			<-start
			time.Sleep(time.Duration(5*round) * time.Millisecond)
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, labels.Mesh, labels.MeshDisabled)
			n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if err := wc.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("kubectl-label")); err != nil {
				errs <- err
				return
			}
			adminRV = n.ResourceVersion
		}()
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		// One more turn of each writer now that everything settled: they
		// must find nothing to write.
		settled, err := fresh()
		require.NoError(t, err)
		for _, f := range []func() error{fleetLoop("auto", true), fleetLoop("enabled", true), fleetLoop("disabled", false)} {
			require.NoError(t, f())
		}
		time.Sleep(200 * time.Millisecond)
		w.Stop()
		<-done

		final, err := fresh()
		require.NoError(t, err)
		assert.Equal(t, settled.ResourceVersion, final.ResourceVersion, "round %d: a settled namespace gets no more writes", round)
		assert.Equal(t, labels.MeshDisabled, final.Labels[labels.Mesh], "round %d: the admin's disabled wins", round)
		for k := range final.Labels {
			if Governed(k) {
				assert.Equal(t, labels.Mesh, k, "round %d: nothing but the opt-out is left of the contract: %v", round, final.Labels)
			}
		}

		afterAdmin, sawAdmin := 0, false
		var prev map[string]string
		for _, v := range versions {
			if sawAdmin {
				afterAdmin++
				assert.Equal(t, labels.MeshDisabled, v.labels[labels.Mesh], "round %d: after the admin's write (rv %s) no writer replaced disabled (rv %s)", round, adminRV, v.rv)
				for k, val := range v.labels {
					if Governed(k) {
						assert.Equal(t, prev[k], val, "round %d: after the admin's opt-out labels only go; rv %s added or changed %s", round, v.rv, k)
					}
				}
			}
			sawAdmin = sawAdmin || v.rv == adminRV
			prev = v.labels
			for k, val := range v.labels {
				if !Governed(k) {
					continue
				}
				ws := Writers(k, val)
				assert.NotEmpty(t, ws, "round %d: %s=%s is not in the contract's table", round, k, val)
				for _, m := range v.held[k] {
					who, ok := writerOf(m)
					assert.True(t, ok, "unknown manager %s", m)
					assert.Contains(t, ws, who, "round %d: %s (a %s) holds %s=%s", round, m, who, k, val)
				}
			}
		}
		require.True(t, sawAdmin, "round %d: the watch saw the admin's write", round)
		// After the admin: at most the mesh operator's withdrawal of its
		// labels and each fleet's withdrawal of its edges.
		assert.LessOrEqual(t, afterAdmin, 3, "round %d: %d writes after the admin's; versions: %v", round, afterAdmin, versions)
		t.Logf("round %d: %d versions, %d after the admin's write", round, len(versions), afterAdmin)
	}
}

func edgesIf(enrolled bool) []string {
	if enrolled {
		return []string{"fleet-system"}
	}
	return nil
}
