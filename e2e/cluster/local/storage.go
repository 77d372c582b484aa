package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Storage: kwok has no volume plugins, so the provider runs a tiny
// provisioner in its own process. It makes one hostPath PersistentVolume (a
// directory under WorkDir/volumes that nothing ever mounts) per unbound claim
// of the default class, pre-bound to the claim through claimRef; the
// controller-manager's persistentvolume-binder completes the binding, as it
// does for any external provisioner.
const (
	// StorageClassName is the default StorageClass of the local cluster.
	StorageClassName = "standard"
	// Provisioner names the in-process provisioner in the StorageClass and in
	// the pv.kubernetes.io/provisioned-by annotation of its volumes.
	Provisioner = "e2e.fleetmesh.dev/loopback"

	annProvisionedBy       = "pv.kubernetes.io/provisioned-by"
	annIsDefaultClass      = "storageclass.kubernetes.io/is-default-class"
	provisionerResync      = 30 * time.Second
	provisionerWorkerCount = 2
)

// storageClass is the default class. Binding is Immediate: kwok nodes have no
// topology a volume could depend on, and immediate binding lets a claim be
// Bound before its Pod is scheduled. Reclaim policy is Delete, like the
// default class of kind and most clouds: deleting a claim deletes its volume,
// so specs that delete fleets also exercise claim clean-up.
func storageClass() *storagev1.StorageClass {
	immediate := storagev1.VolumeBindingImmediate
	deletePolicy := corev1.PersistentVolumeReclaimDelete
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{annIsDefaultClass: "true"},
		},
		Provisioner:       Provisioner,
		VolumeBindingMode: &immediate,
		ReclaimPolicy:     &deletePolicy,
	}
}

func createStorageClass(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.StorageV1().StorageClasses().Create(ctx, storageClass(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", StorageClassName, err)
	}
	return nil
}

// provisioner reconciles claims of StorageClassName into volumes and deletes
// released volumes it made.
type provisioner struct {
	client      kubernetes.Interface
	dir         string
	factory     informers.SharedInformerFactory
	pvcInformer cache.SharedIndexInformer
	pvInformer  cache.SharedIndexInformer
	queue       workqueue.TypedRateLimitingInterface[string]
	workers     sync.WaitGroup
}

const (
	claimKeyPrefix  = "pvc/"
	volumeKeyPrefix = "pv/"
)

func newProvisioner(client kubernetes.Interface, dir string) (*provisioner, error) {
	factory := informers.NewSharedInformerFactory(client, provisionerResync)
	p := &provisioner{
		client:      client,
		dir:         dir,
		factory:     factory,
		pvcInformer: factory.Core().V1().PersistentVolumeClaims().Informer(),
		pvInformer:  factory.Core().V1().PersistentVolumes().Informer(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "loopback-provisioner"}),
	}
	if _, err := p.pvcInformer.AddEventHandler(p.handler(claimKeyPrefix)); err != nil {
		return nil, err
	}
	if _, err := p.pvInformer.AddEventHandler(p.handler(volumeKeyPrefix)); err != nil {
		return nil, err
	}
	return p, nil
}

// run starts the provisioner until ctx ends and returns once its caches are
// synced, giving up when either ctx or syncCtx ends first.
func (p *provisioner) run(ctx, syncCtx context.Context) error {
	p.factory.Start(ctx.Done())
	syncStop, cancel := context.WithCancel(syncCtx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	if !cache.WaitForCacheSync(syncStop.Done(), p.pvcInformer.HasSynced, p.pvInformer.HasSynced) {
		return fmt.Errorf("provisioner caches did not sync: %w", errors.Join(syncCtx.Err(), ctx.Err()))
	}
	for range provisionerWorkerCount {
		p.workers.Go(func() { p.work(ctx) })
	}
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	return nil
}

// wait returns once the workers and informers stopped (after ctx ended).
func (p *provisioner) wait() {
	p.queue.ShutDown()
	p.workers.Wait()
	p.factory.Shutdown()
}

func (p *provisioner) handler(prefix string) cache.ResourceEventHandler {
	add := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			p.queue.Add(prefix + key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(_, obj any) { add(obj) },
	}
}

func (p *provisioner) work(ctx context.Context) {
	for {
		key, shutdown := p.queue.Get()
		if shutdown {
			return
		}
		err := p.sync(ctx, key)
		if err != nil && ctx.Err() == nil {
			p.queue.AddRateLimited(key)
		} else {
			p.queue.Forget(key)
		}
		p.queue.Done(key)
	}
}

func (p *provisioner) sync(ctx context.Context, key string) error {
	if name, ok := strings.CutPrefix(key, claimKeyPrefix); ok {
		obj, exists, err := p.pvcInformer.GetIndexer().GetByKey(name)
		if err != nil || !exists {
			return err
		}
		return p.provision(ctx, obj.(*corev1.PersistentVolumeClaim))
	}
	if name, ok := strings.CutPrefix(key, volumeKeyPrefix); ok {
		obj, exists, err := p.pvInformer.GetIndexer().GetByKey(name)
		if err != nil || !exists {
			return err
		}
		return p.reclaim(ctx, obj.(*corev1.PersistentVolume))
	}
	return nil
}

// provision creates the volume for a pending claim of our class.
func (p *provisioner) provision(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	if !wantsVolume(claim) {
		return nil
	}
	pv := volumeFor(claim, filepath.Join(p.dir, volumeName(claim)))
	if _, exists, _ := p.pvInformer.GetIndexer().GetByKey(pv.Name); exists {
		return nil
	}
	if err := os.MkdirAll(pv.Spec.HostPath.Path, 0o755); err != nil {
		return err
	}
	_, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("provision %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

func wantsVolume(claim *corev1.PersistentVolumeClaim) bool {
	return claim.DeletionTimestamp == nil &&
		claim.Spec.VolumeName == "" &&
		claim.Spec.StorageClassName != nil && *claim.Spec.StorageClassName == StorageClassName &&
		claim.Status.Phase == corev1.ClaimPending
}

// volumeName is deterministic so a retried or duplicate event never makes a
// second volume for the same claim.
func volumeName(claim *corev1.PersistentVolumeClaim) string { return "pvc-" + string(claim.UID) }

func volumeFor(claim *corev1.PersistentVolumeClaim, path string) *corev1.PersistentVolume {
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	size := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	accessModes := claim.Spec.AccessModes
	if len(accessModes) == 0 {
		accessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        volumeName(claim),
			Annotations: map[string]string{annProvisionedBy: Provisioner},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   accessModes,
			VolumeMode:                    claim.Spec.VolumeMode,
			StorageClassName:              StorageClassName,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef: &corev1.ObjectReference{
				Kind:       "PersistentVolumeClaim",
				APIVersion: "v1",
				Namespace:  claim.Namespace,
				Name:       claim.Name,
				UID:        claim.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &dirOrCreate},
			},
		},
	}
}

// reclaim deletes a Released volume we provisioned whose policy is Delete,
// the job an external provisioner has (the binder does not delete volumes of
// provisioners it does not know).
func (p *provisioner) reclaim(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Annotations[annProvisionedBy] != Provisioner ||
		pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		pv.DeletionTimestamp != nil {
		return nil
	}
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pv.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete released volume %s: %w", pv.Name, err)
	}
	// Only ever remove a directory this provisioner made.
	if pv.Spec.HostPath != nil && filepath.Dir(pv.Spec.HostPath.Path) == p.dir {
		return os.RemoveAll(pv.Spec.HostPath.Path)
	}
	return nil
}
