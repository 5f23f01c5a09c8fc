package manifesttest

import (
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// peer is a pod that may try to connect to the scaler.
type peer struct {
	what      string
	namespace string
	labels    map[string]string
}

// nsLabels are the labels Kubernetes gives every namespace.
func nsLabels(ns string) labels.Set { return labels.Set{"kubernetes.io/metadata.name": ns} }

var (
	// KEDA's operator pod as the release YAML (config/manager/manager.yaml) and the Helm
	// chart (keda/templates/manager/deployment.yaml) label it.
	kedaOperatorYAML = peer{"KEDA operator (release YAML)", "keda", map[string]string{"app": "keda-operator", "name": "keda-operator"}}
	kedaOperatorHelm = peer{"KEDA operator (Helm)", "keda", map[string]string{"app": "keda-operator", "name": "keda-operator",
		"app.kubernetes.io/name": "keda-operator", "app.kubernetes.io/component": "operator", "app.kubernetes.io/part-of": "keda-operator",
		"app.kubernetes.io/instance": "keda", "app.kubernetes.io/managed-by": "Helm"}}
	// A Prometheus pod of the Prometheus Operator.
	prometheusPod = peer{"Prometheus", "monitoring", map[string]string{"app.kubernetes.io/name": "prometheus",
		"app.kubernetes.io/instance": "k8s", "prometheus": "k8s", "app.kubernetes.io/managed-by": "prometheus-operator"}}
	// Pods that must reach neither port.
	outsiders = []peer{
		{"KEDA metrics API server", "keda", map[string]string{"app": "keda-operator-metrics-apiserver", "app.kubernetes.io/name": "keda-operator-metrics-apiserver"}},
		{"KEDA admission webhooks", "keda", map[string]string{"app": "keda-admission-webhooks", "app.kubernetes.io/name": "keda-admission-webhooks"}},
		{"a pod labelled as KEDA's operator in another namespace", "default", map[string]string{"app": "keda-operator", "name": "keda-operator"}},
		{"a pod labelled as Prometheus in another namespace", "default", map[string]string{"app.kubernetes.io/name": "prometheus"}},
		{"Grafana beside Prometheus", "monitoring", map[string]string{"app.kubernetes.io/name": "grafana"}},
		{"an unlabelled pod in the scaler's namespace", "dtq", map[string]string{}},
	}
)

func selects(sel *metav1.LabelSelector, set labels.Set) (bool, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(set), nil
}

// policySelects reports whether np (in namespace ns) selects pod p for ingress.
func policySelects(np *networkingv1.NetworkPolicy, ns string, p podRef) (bool, error) {
	if ns != p.namespace {
		return false, nil
	}
	ingress := len(np.Spec.PolicyTypes) == 0
	for _, pt := range np.Spec.PolicyTypes {
		ingress = ingress || pt == networkingv1.PolicyTypeIngress
	}
	if !ingress {
		return false, nil
	}
	return selects(&np.Spec.PodSelector, p.labels)
}

// admits evaluates np's ingress rules, as the NetworkPolicy API defines them, for a
// TCP connection from src to port on container c of the selected pod in namespace ns.
// An ipBlock peer is an error: it admits by address, which this cannot judge.
func admits(np *networkingv1.NetworkPolicy, ns string, c *corev1.Container, src peer, port int) (bool, error) {
	for _, rule := range np.Spec.Ingress {
		fromOK := len(rule.From) == 0
		for _, pr := range rule.From {
			if pr.IPBlock != nil {
				return false, fmt.Errorf("an ipBlock peer")
			}
			if pr.NamespaceSelector == nil && pr.PodSelector == nil {
				return false, fmt.Errorf("a peer with no selector")
			}
			nsOK := src.namespace == ns
			if pr.NamespaceSelector != nil {
				ok, err := selects(pr.NamespaceSelector, nsLabels(src.namespace))
				if err != nil {
					return false, err
				}
				nsOK = ok
			}
			podOK := true
			if pr.PodSelector != nil {
				ok, err := selects(pr.PodSelector, src.labels)
				if err != nil {
					return false, err
				}
				podOK = ok
			}
			fromOK = fromOK || nsOK && podOK
		}
		portOK := len(rule.Ports) == 0
		for _, pp := range rule.Ports {
			if pp.Protocol != nil && *pp.Protocol != corev1.ProtocolTCP {
				continue
			}
			switch {
			case pp.Port == nil:
				portOK = true
			case pp.Port.Type == intstr.String:
				for _, cp := range c.Ports {
					if cp.Name == pp.Port.StrVal && int(cp.ContainerPort) == port {
						portOK = true
					}
				}
			case pp.EndPort != nil:
				portOK = portOK || port >= pp.Port.IntValue() && port <= int(*pp.EndPort)
			default:
				portOK = portOK || port == pp.Port.IntValue()
			}
		}
		if fromOK && portOK {
			return true, nil
		}
	}
	return false, nil
}

// scalerPolicyProblems lists how the NetworkPolicies of a build fail to admit exactly
// KEDA's operator to the scaler's gRPC port and Prometheus to its HTTP port: one policy
// must select the scaler pods and no other workload of the build.
func scalerPolicyProblems(policies []object, scaler podRef, others []podRef, c *corev1.Container, grpcPort, httpPort int) []string {
	var out []string
	var sel []object
	for _, o := range policies {
		np := o.value.(*networkingv1.NetworkPolicy)
		ok, err := policySelects(np, o.namespace, scaler)
		if err != nil {
			out = append(out, fmt.Sprintf("%v: %v", o, err))
			continue
		}
		if !ok {
			continue
		}
		sel = append(sel, o)
		for _, p := range others {
			if ok, _ := policySelects(np, o.namespace, p); ok {
				out = append(out, fmt.Sprintf("%v: also selects %s", o, p.what))
			}
		}
	}
	if len(sel) != 1 {
		return append(out, fmt.Sprintf("%d NetworkPolicies select the scaler pods %v, want 1", len(sel), scaler.labels))
	}
	np, ns := sel[0].value.(*networkingv1.NetworkPolicy), sel[0].namespace
	expect := func(src peer, port int, name string, want bool) {
		got, err := admits(np, ns, c, src, port)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("%v: %v", sel[0], err))
		case got != want:
			verb := "admits"
			if want {
				verb = "does not admit"
			}
			out = append(out, fmt.Sprintf("%v %s %s (namespace %s, labels %v) to the %s port %d", sel[0], verb, src.what, src.namespace, src.labels, name, port))
		}
	}
	for _, k := range []peer{kedaOperatorYAML, kedaOperatorHelm} {
		expect(k, grpcPort, "gRPC", true)
		expect(k, httpPort, "HTTP", false)
	}
	expect(prometheusPod, httpPort, "HTTP", true)
	expect(prometheusPod, grpcPort, "gRPC", false)
	for _, o := range outsiders {
		if o.namespace == "dtq" {
			o.namespace = scaler.namespace
		}
		expect(o, grpcPort, "gRPC", false)
		expect(o, httpPort, "HTTP", false)
	}
	for _, w := range others {
		src := peer{w.what, w.namespace, w.labels}
		expect(src, grpcPort, "gRPC", false)
		expect(src, httpPort, "HTTP", false)
	}
	return out
}

// scalerPorts are the gRPC and HTTP ports the build's scaler container listens on (by
// its environment, checked against its container ports).
func scalerPorts(t *testing.T, objs []object, p podRef) (c *corev1.Container, grpcPort, httpPort int) {
	t.Helper()
	c = p.container(t)
	env := effectiveEnv(t, objs, p, c)
	env["DTQ_REDIS_URL"] = "redis://stand-in:6379/0" // a Secret's value in the cluster
	cfg := scalerConfig(t, p.what, env, &p)
	grpcPort = scalerGRPCPort(t, p, c, env)
	found := false
	for _, cp := range c.Ports {
		if cp.Name == "http" {
			found = int(cp.ContainerPort) == cfg.Port
		}
	}
	if !found {
		t.Errorf("%s: no container port http on PORT %d", p.what, cfg.Port)
	}
	return c, grpcPort, cfg.Port
}

// TestScalerNetworkPolicy: in every build (the base and each overlay) one
// NetworkPolicy selects the scaler pods, and it admits KEDA's operator (as either
// install labels it, in its namespace) to the gRPC port only, Prometheus to the HTTP
// port only, and nobody else: not KEDA's other components, not a pod wearing the
// operator's labels elsewhere, not the workers.
func TestScalerNetworkPolicy(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, dir := range kustomizations(t) {
		objs := build(t, dir)
		p := scalerPod(t, objs)
		c, grpcPort, httpPort := scalerPorts(t, objs, p)
		for _, problem := range scalerPolicyProblems(find(objs, "NetworkPolicy", ""), p, workers(objs), c, grpcPort, httpPort) {
			t.Errorf("kustomize build %s: %s", dir, problem)
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("checked %d builds, want base, keda, keda-tls, keda-job, knative", checked)
	}
}

// TestScalerNetworkPolicyCheckCanFail: the check above catches the policies that would
// let others in: selectors split into two peers (then any pod labelled as the operator,
// and every pod of KEDA's namespace, get in), a rule without ports, a policy that
// selects other pods, and no policy at all.
func TestScalerNetworkPolicyCheckCanFail(t *testing.T) {
	t.Parallel()
	objs := build(t, "../kubernetes/keda")
	p := scalerPod(t, objs)
	c, grpcPort, httpPort := scalerPorts(t, objs, p)
	policies := find(objs, "NetworkPolicy", "dtq-scaler")
	if len(policies) != 1 {
		t.Fatalf("%d NetworkPolicies named dtq-scaler in the keda build, want 1", len(policies))
	}
	mutate := func(f func(np *networkingv1.NetworkPolicy)) []object {
		o := policies[0]
		np := o.value.(*networkingv1.NetworkPolicy).DeepCopy()
		f(np)
		o.value = np
		return []object{o}
	}
	for name, objs := range map[string][]object{
		"selectors split into two peers": mutate(func(np *networkingv1.NetworkPolicy) {
			pr := np.Spec.Ingress[0].From[0]
			np.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{{NamespaceSelector: pr.NamespaceSelector}, {PodSelector: pr.PodSelector}}
		}),
		"KEDA's rule without ports": mutate(func(np *networkingv1.NetworkPolicy) { np.Spec.Ingress[0].Ports = nil }),
		"KEDA's rule on a port number not the gRPC one": mutate(func(np *networkingv1.NetworkPolicy) {
			port := intstr.FromInt32(int32(httpPort))
			np.Spec.Ingress[0].Ports[0].Port = &port
		}),
		"a rule from anywhere": mutate(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
		}),
		"a policy selecting every pod": mutate(func(np *networkingv1.NetworkPolicy) { np.Spec.PodSelector = metav1.LabelSelector{} }),
		"egress only": mutate(func(np *networkingv1.NetworkPolicy) {
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		}),
		"no policy": nil,
	} {
		if got := scalerPolicyProblems(objs, p, workers(build(t, "../kubernetes/keda")), c, grpcPort, httpPort); len(got) == 0 {
			t.Errorf("%s: no problem found", name)
		} else {
			t.Logf("%s: %s (and %s more)", name, got[0], strconv.Itoa(len(got)-1))
		}
	}
}
