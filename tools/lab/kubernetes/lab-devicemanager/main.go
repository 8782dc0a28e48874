// Command lab-devicemanager is the device-plugin half of a kubelet for one lab node, built from kubelet's own code.
//
// The lab's nodes are kwok nodes: kwok keeps their status and runs their pods' lifecycle, but it has no device
// manager. On a lab GPU node this process adds one, so that real device plugins (HAMi's volcano-vgpu-device-plugin)
// meet what a kubelet gives them:
//
//   - kubelet's device manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) serves the Registration service on
//     /var/lib/kubelet/device-plugins/kubelet.sock, dials each registered plugin and runs ListAndWatch with it -
//     with gRPC's default 4 MiB message limit, so an oversized device list fails here as it fails on a real node;
//   - every 10 s (kubelet's nodeStatusUpdateFrequency) its capacity and allocatable go into the node's status the
//     way kubelet's node status setter writes them (removed resources drop to 0);
//   - a pod bound to the node is admitted by kubelet's admit handlers in kubelet's order: the topology manager
//     (policy none), which calls the device manager's Allocate for every init and app container, then the
//     predicate handler (node fit, with the device manager's UpdatePluginResources). A rejected pod goes Failed with
//     kubelet's reason and message ("Pod was rejected: ...").
//   - for an admitted pod it asks GetDeviceRunContainerOptions per container, as kubelet does when it starts a
//     container, and records the env, mounts, devices and annotations the container would get on the pod
//     (annotation lab.gpufleet.io/device-run-options), then marks the pod admitted (lab.gpufleet.io/admitted):
//     the lab's kwok stage starts a pod that asks for vGPUs only after that, as kubelet starts it only after
//     admission.
//
// It runs in the node's mount namespace (the lab's podman test host), so the socket directory is the node's own.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/fields"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

const (
	annotationRunOptions = "lab.gpufleet.io/device-run-options"
	annotationAdmitted   = "lab.gpufleet.io/admitted"
)

type sourcesReady struct{}

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

// containerOptions is what GetDeviceRunContainerOptions returns for one container, in JSON.
type containerOptions struct {
	Envs        map[string]string   `json:"envs,omitempty"`
	Mounts      []map[string]any    `json:"mounts,omitempty"`
	Devices     []map[string]string `json:"devices,omitempty"`
	Annotations map[string]string   `json:"annotations,omitempty"`
	CDIDevices  []string            `json:"cdiDevices,omitempty"`
	Error       string              `json:"error,omitempty"`
}

type lab struct {
	node     string
	client   kubernetes.Interface
	dm       *devicemanager.ManagerImpl
	handlers []lifecycle.PodAdmitHandler
	pods     cache.Indexer
	nodes    cache.Indexer
	queue    workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex
	admitted sets.Set[types.UID]
}

func terminal(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// activePods: the admitted pods of this node that are not terminal (kubelet's GetActivePods); the device manager
// frees the devices of every other pod.
func (l *lab) activePods() []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	var active []*v1.Pod
	for _, obj := range l.pods.List() {
		pod := obj.(*v1.Pod)
		if l.admitted.Has(pod.UID) && !terminal(pod) {
			active = append(active, pod)
		}
	}
	return active
}

func (l *lab) cachedNode(context.Context, bool) (*v1.Node, error) {
	obj, exists, err := l.nodes.GetByKey(l.node)
	if err != nil || !exists {
		return nil, fmt.Errorf("node %s not known yet: %v", l.node, err)
	}
	return obj.(*v1.Node), nil
}

// syncNodeStatus writes the device plugin resources as kubelet's node status setter does.
func (l *lab) syncNodeStatus(ctx context.Context) {
	capacity, allocatable, removed := l.dm.GetCapacity()
	node, err := l.cachedNode(ctx, true)
	if err != nil {
		return
	}
	wantCap, wantAlloc := v1.ResourceList{}, v1.ResourceList{}
	for name, quantity := range capacity {
		wantCap[name] = quantity
	}
	for name, quantity := range allocatable {
		wantAlloc[name] = quantity
	}
	for _, name := range removed {
		wantCap[v1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
		wantAlloc[v1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
	}
	changed := false
	for name, quantity := range wantCap {
		if have, ok := node.Status.Capacity[name]; !ok || !equality.Semantic.DeepEqual(have, quantity) {
			changed = true
		}
	}
	for name, quantity := range wantAlloc {
		if have, ok := node.Status.Allocatable[name]; !ok || !equality.Semantic.DeepEqual(have, quantity) {
			changed = true
		}
	}
	if !changed {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"capacity": wantCap, "allocatable": wantAlloc}})
	if _, err := l.client.CoreV1().Nodes().Patch(ctx, l.node, types.StrategicMergePatchType, patch, metav1.PatchOptions{},
		"status"); err != nil {
		klog.ErrorS(err, "Updating the node status failed", "node", l.node)
		return
	}
	klog.InfoS("Node status updated with device plugin resources", "node", l.node, "capacity", wantCap,
		"allocatable", wantAlloc)
}

func asksForExtendedResources(pod *v1.Pod) bool {
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for name := range c.Resources.Limits {
			if strings.Contains(string(name), "/") {
				return true
			}
		}
	}
	return false
}

// admit runs kubelet's admit handlers on one pod and records the outcome on it.
func (l *lab) admit(ctx context.Context, key string) error {
	obj, exists, err := l.pods.GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*v1.Pod)
	l.mu.Lock()
	done := l.admitted.Has(pod.UID)
	l.mu.Unlock()
	if done || pod.DeletionTimestamp != nil || terminal(pod) || pod.Spec.NodeName != l.node {
		return nil
	}
	if pod.Annotations[annotationAdmitted] == "true" {
		// Admitted before this process restarted; its devices are in the device manager's checkpoint.
		l.mu.Lock()
		l.admitted.Insert(pod.UID)
		l.mu.Unlock()
		return nil
	}
	others := []*v1.Pod{}
	for _, active := range l.activePods() {
		if active.UID != pod.UID {
			others = append(others, active)
		}
	}
	attrs := &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: others}
	for _, handler := range l.handlers {
		result := handler.Admit(attrs)
		if !result.Admit {
			return l.reject(ctx, pod, result.Reason, result.Message)
		}
	}
	l.mu.Lock()
	l.admitted.Insert(pod.UID)
	l.mu.Unlock()
	if !asksForExtendedResources(pod) {
		return nil
	}
	options := map[string]containerOptions{}
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		container := c
		opts, err := l.dm.GetDeviceRunContainerOptions(ctx, pod, &container)
		entry := containerOptions{}
		if err != nil {
			entry.Error = err.Error()
		} else if opts != nil {
			entry.Envs = map[string]string{}
			for _, env := range opts.Envs {
				entry.Envs[env.Name] = env.Value
			}
			for _, m := range opts.Mounts {
				entry.Mounts = append(entry.Mounts, map[string]any{"containerPath": m.ContainerPath,
					"hostPath": m.HostPath, "readOnly": m.ReadOnly})
			}
			for _, d := range opts.Devices {
				entry.Devices = append(entry.Devices, map[string]string{"containerPath": d.PathInContainer,
					"hostPath": d.PathOnHost, "permissions": d.Permissions})
			}
			if len(opts.Annotations) > 0 {
				entry.Annotations = map[string]string{}
				for _, a := range opts.Annotations {
					entry.Annotations[a.Name] = a.Value
				}
			}
			for _, d := range opts.CDIDevices {
				entry.CDIDevices = append(entry.CDIDevices, d.Name)
			}
		}
		options[container.Name] = entry
	}
	recorded, _ := json.Marshal(options)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		annotationRunOptions: string(recorded), annotationAdmitted: "true"}}})
	if _, err := l.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}); err != nil {
		return err
	}
	klog.InfoS("Pod admitted", "pod", klog.KObj(pod), "runOptions", string(recorded))
	return nil
}

// reject is kubelet's rejectPod: a warning event and the pod Failed with the handler's reason.
func (l *lab) reject(ctx context.Context, pod *v1.Pod, reason, message string) error {
	klog.InfoS("Pod rejected", "pod", klog.KObj(pod), "reason", reason, "message", message)
	status := pod.Status.DeepCopy()
	status.Phase = v1.PodFailed
	status.Reason = reason
	status.Message = "Pod was rejected: " + message
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"phase": status.Phase, "reason": status.Reason,
		"message": status.Message}})
	_, err := l.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}, "status")
	now := metav1.Now()
	_, _ = l.client.CoreV1().Events(pod.Namespace).Create(ctx, &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:         reason, Message: message, Type: v1.EventTypeWarning, Count: 1,
		FirstTimestamp: now, LastTimestamp: now, Source: v1.EventSource{Component: "kubelet", Host: l.node},
	}, metav1.CreateOptions{})
	return err
}

func main() {
	var node, kubeconfig string
	var statusPeriod time.Duration
	flag.StringVar(&node, "node", "", "the node this device manager serves")
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the lab's API server")
	flag.DurationVar(&statusPeriod, "node-status-update-frequency", 10*time.Second,
		"how often the device plugin resources are written to the node status (kubelet's default: 10s)")
	klog.InitFlags(nil)
	flag.Parse()
	if node == "" || kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "usage: lab-devicemanager --node NAME --kubeconfig FILE")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	logger := klog.FromContext(ctx)

	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	client := kubernetes.NewForConfigOrDie(config)

	topology, err := topologymanager.NewManager(nil, topologymanager.PolicyNone, "container", nil)
	if err != nil {
		klog.Fatalf("topology manager: %v", err)
	}
	dm, err := devicemanager.NewManagerImpl(nil, topology)
	if err != nil {
		klog.Fatalf("device manager: %v", err)
	}
	topology.AddHintProvider(logger, dm)

	podInformers := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(
		func(o *metav1.ListOptions) { o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String() }))
	nodeInformers := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(
		func(o *metav1.ListOptions) { o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String() }))
	l := &lab{node: node, client: client, dm: dm, admitted: sets.New[types.UID](),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	podInformer := podInformers.Core().V1().Pods().Informer()
	l.pods = podInformer.GetIndexer()
	nodeInformer := nodeInformers.Core().V1().Nodes().Informer()
	l.nodes = nodeInformer.GetIndexer()
	l.handlers = []lifecycle.PodAdmitHandler{topology,
		lifecycle.NewPredicateAdmitHandler(l.cachedNode, lifecycle.NewAdmissionFailureHandlerStub(), dm.UpdatePluginResources)}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			l.queue.Add(key)
		}
	}
	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) }})
	podInformers.Start(ctx.Done())
	nodeInformers.Start(ctx.Done())
	podInformers.WaitForCacheSync(ctx.Done())
	nodeInformers.WaitForCacheSync(ctx.Done())
	// Pods admitted before a restart keep their devices (the device manager's checkpoint) and count as active.
	for _, obj := range l.pods.List() {
		if pod := obj.(*v1.Pod); pod.Annotations[annotationAdmitted] == "true" {
			l.admitted.Insert(pod.UID)
		}
	}

	if err := dm.Start(logger, l.activePods, sourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		klog.Fatalf("starting the device manager: %v", err)
	}
	klog.InfoS("Lab device manager serving", "node", node)

	go func() {
		ticker := time.NewTicker(statusPeriod)
		defer ticker.Stop()
		for {
			l.syncNodeStatus(ctx)
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	go func() {
		<-ctx.Done()
		l.queue.ShutDown()
	}()
	// One worker: kubelet admits pods one at a time, in the order it sees them.
	for {
		key, shutdown := l.queue.Get()
		if shutdown {
			break
		}
		if err := l.admit(ctx, key); err != nil {
			klog.ErrorS(err, "Admission failed; retrying", "pod", key)
			l.queue.AddRateLimited(key)
		} else {
			l.queue.Forget(key)
		}
		l.queue.Done(key)
	}
	if err := dm.Stop(logger); err != nil {
		klog.ErrorS(err, "Stopping the device manager")
	}
}
