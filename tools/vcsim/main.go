// Command hostaffinity-vcsim runs govmomi's vCenter simulator with an inventory shaped for
// hostaffinity's tests: one datacenter, N clusters of M hosts, and node VMs spread round-robin over
// every host, named so that a test (or the dev command) can match them to Kubernetes nodes.
// Optional flags add the awkward cases a node-labeller must handle: VMs sharing a BIOS UUID, host
// names that are not valid label values, and hosts in maintenance mode.
//
// ReconfigureComputeResource_Task also applies the spec's dasConfig (vSphere HA), which govmomi
// 0.24's simulator ignores, so tests can set HA as an administrator would (see withDasConfig).
// Besides the SOAP API under /sdk it serves the vSphere Automation (REST) API under /rest, where
// tag categories, tags and tag associations live (tests create and attach them there).
// A rule edit is addressed by the rule's key, as vCenter addresses it (so an edit may rename a
// rule in place), where govmomi's simulator matches edits by name (withRuleEditsByKey).
// With -enter-maintenance-seconds, EnterMaintenanceMode_Task behaves as vCenter's does while DRS
// evacuates the host: the call returns a running task at once, the task stays running for that
// long, and only then does the host report runtime.inMaintenanceMode (slowMaintenance below).
//
// With -tls-cert and -tls-key it serves https with that certificate (a test's own CA signs it, as a
// site's VMCA signs vCenter's), else plain http.
//
// It prints one line "VCSIM_URL=<url>" once the inventory is ready, then serves until SIGTERM.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"html"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/simulator"
	// The vSphere Automation (REST) API under /rest: tag categories, tags and their associations,
	// which the node-labeller reads for zone and region labels (govmomi vapi/simulator).
	_ "github.com/vmware/govmomi/vapi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// createWorkers is how many VMs are created at once: vcsim runs each call under one global lock,
// so more workers only overlap the client's own work with the server's.
const createWorkers = 2

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (port 0 picks a free port)")
	clusters := flag.Int("clusters", 1, "number of clusters in the datacenter")
	hosts := flag.Int("hosts", 3, "ESXi hosts per cluster")
	vms := flag.Int("vms", 6, "node VMs, spread round-robin over all hosts")
	prefix := flag.String("vm-prefix", "node-", "VM name prefix; VMs are <prefix>1 .. <prefix>N")
	names := flag.String("vm-names", "", "comma-separated VM names (overrides -vms and -vm-prefix)")
	login := flag.String("login", "user:pass", "USER:PASSWORD that Login accepts (and nothing else)")
	tlsCert := flag.String("tls-cert", "", "PEM certificate (chain) to serve https with; needs -tls-key")
	tlsKey := flag.String("tls-key", "", "PEM private key of -tls-cert")
	var dupUUID, renames, maintenance listFlag
	flag.Var(&dupUUID, "duplicate-uuid", "vmA,vmB: give vmB the BIOS UUID (config.uuid) of vmA (repeatable)")
	flag.Var(&renames, "rename-host", "HOST=NEW NAME: rename a host, by name or moid (repeatable)")
	flag.Var(&maintenance, "maintenance", "HOST: put a host, by name or moid, in maintenance mode (repeatable)")
	enterSeconds := flag.Float64("enter-maintenance-seconds", 0, "how long EnterMaintenanceMode_Task stays running before the host is in maintenance mode (0: vcsim's own, immediate and unreported to property collectors)")
	flag.Parse()

	model := simulator.VPX()
	model.Datacenter = 1
	model.Cluster = *clusters
	model.ClusterHost = *hosts
	model.Host = 0
	model.Machine = 0
	model.Autostart = true
	if err := model.Create(); err != nil {
		log.Fatalf("create inventory: %v", err)
	}
	defer model.Remove()

	// A Listen.User of its own makes vcsim check the password; by default it accepts any login.
	user, pass, _ := strings.Cut(*login, ":")
	model.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(user, pass)}
	if *tlsCert != "" || *tlsKey != "" {
		// simulator.Service.TLS: NewServer starts https with these certificates (govmomi
		// simulator/simulator.go NewServer; without Certificates it would use Go's test cert).
		pair, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			log.Fatalf("tls: %v", err)
		}
		model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	}
	// Serve the endpoints other packages registered: the vAPI (REST) simulator imported above.
	model.Service.RegisterEndpoints = true
	server := model.Service.NewServer()
	defer server.Close()
	// No request has been served yet: the handler can still be wrapped without a race.
	server.Config.Handler = withDasConfig(server.Config.Handler)
	server.Config.Handler = withRuleEditsByKey(server.Config.Handler)
	if *enterSeconds > 0 {
		// Before any client connects: the http.Server reads its Handler on every request.
		delay := time.Duration(*enterSeconds * float64(time.Second))
		server.Config.Handler = &slowMaintenance{next: server.Config.Handler, delay: delay}
	}

	if err := shapeInventory(server.URL, nodeNames(*names, *prefix, *vms), dupUUID, maintenance); err != nil {
		log.Fatalf("shape inventory: %v", err)
	}
	// vcsim 0.24 has no Rename_Task on HostSystem, so hosts are renamed inside the simulator.
	for _, r := range renames {
		if err := renameHost(r); err != nil {
			log.Fatalf("rename host: %v", err)
		}
	}

	fmt.Printf("VCSIM_URL=%s\n", server.URL.String())
	os.Stdout.Sync()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

func nodeNames(list, prefix string, count int) []string {
	if list != "" {
		return strings.Split(list, ",")
	}
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

// shapeInventory works through the SOAP API, as a real client would: it creates the node VMs,
// then applies the duplicate UUIDs and maintenance modes asked for.
func shapeInventory(u *url.URL, vmNames, dupUUID, maintenance []string) error {
	ctx := context.Background()
	client, err := govmomi.NewClient(ctx, u, true)
	if err != nil {
		return err
	}
	defer client.Logout(ctx)

	finder := find.NewFinder(client.Client, false)
	dc, err := finder.DefaultDatacenter(ctx)
	if err != nil {
		return err
	}
	finder.SetDatacenter(dc)
	folders, err := dc.Folders(ctx)
	if err != nil {
		return err
	}
	allHosts, err := finder.HostSystemList(ctx, "*/*")
	if err != nil {
		return err
	}
	if err := createNodeVMs(ctx, folders.VmFolder, allHosts, vmNames); err != nil {
		return err
	}
	for _, pair := range dupUUID {
		if err := duplicateUUID(ctx, finder, pair); err != nil {
			return fmt.Errorf("duplicate-uuid %q: %w", pair, err)
		}
	}
	for _, key := range maintenance {
		host := findHost(allHosts, key)
		if host == nil {
			return fmt.Errorf("maintenance: no host %q", key)
		}
		task, err := host.EnterMaintenanceMode(ctx, 0, false, nil)
		if _, err := finished(ctx, task, err); err != nil {
			return fmt.Errorf("maintenance %q: %w", key, err)
		}
	}
	return nil
}

// createNodeVMs creates powered-on VMs, placing the i-th VM on the i-th host (mod the host count)
// in that host's cluster resource pool.
func createNodeVMs(ctx context.Context, folder *object.Folder, hosts []*object.HostSystem, names []string) error {
	pools := make([]*object.ResourcePool, len(hosts))
	for i, host := range hosts {
		pool, err := host.ResourcePool(ctx)
		if err != nil {
			return err
		}
		pools[i] = pool
	}
	jobs := make(chan int)
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for w := 0; w < createWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				h := i % len(hosts)
				if err := createNodeVM(ctx, folder, pools[h], hosts[h], names[i]); err != nil {
					errs <- fmt.Errorf("%s: %w", names[i], err)
				}
			}
		}()
	}
	for i := range names {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	return <-errs // nil when no worker failed
}

func createNodeVM(ctx context.Context, folder *object.Folder, pool *object.ResourcePool, host *object.HostSystem, name string) error {
	spec := types.VirtualMachineConfigSpec{
		Name:    name,
		GuestId: string(types.VirtualMachineGuestOsIdentifierOtherGuest),
		Files:   &types.VirtualMachineFileInfo{VmPathName: "[LocalDS_0]"},
	}
	task, err := folder.CreateVM(ctx, spec, pool, host)
	info, err := finished(ctx, task, err)
	if err != nil {
		return err
	}
	vm := object.NewVirtualMachine(folder.Client(), info.Result.(types.ManagedObjectReference))
	task, err = vm.PowerOn(ctx)
	_, err = finished(ctx, task, err)
	return err
}

// finished returns the outcome of a task. vcsim 0.24 runs a task to completion before it answers
// the call that started it, so one read of task.info is enough. task.Wait would also work, but
// every property collector it creates stays registered in vcsim 0.24 and slows each later update:
// waiting on 4,000 start-up tasks made a 2,000-VM start-up take twice as long.
func finished(ctx context.Context, task *object.Task, err error) (*types.TaskInfo, error) {
	if err != nil {
		return nil, err
	}
	var t mo.Task
	pc := property.DefaultCollector(task.Client())
	if err := pc.RetrieveOne(ctx, task.Reference(), []string{"info"}, &t); err != nil {
		return nil, err
	}
	if t.Info.State != types.TaskInfoStateSuccess {
		return nil, fmt.Errorf("task %s: %s", t.Info.State, t.Info.Error.LocalizedMessage)
	}
	return &t.Info, nil
}

// duplicateUUID reconfigures vmB with vmA's config.uuid, as a careless clone would leave it.
func duplicateUUID(ctx context.Context, finder *find.Finder, pair string) error {
	names := strings.Split(pair, ",")
	if len(names) != 2 {
		return fmt.Errorf("want vmA,vmB")
	}
	src, err := finder.VirtualMachine(ctx, names[0])
	if err != nil {
		return err
	}
	dst, err := finder.VirtualMachine(ctx, names[1])
	if err != nil {
		return err
	}
	task, err := dst.Reconfigure(ctx, types.VirtualMachineConfigSpec{Uuid: src.UUID(ctx)})
	_, err = finished(ctx, task, err)
	return err
}

func findHost(hosts []*object.HostSystem, key string) *object.HostSystem {
	for _, h := range hosts {
		if h.Name() == key || h.Reference().Value == key {
			return h
		}
	}
	return nil
}

// renameHost applies "HOST=NEW NAME" to the simulator's inventory, through the registry so that
// property collectors see the change.
func renameHost(arg string) error {
	key, name, ok := strings.Cut(arg, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want HOST=NEW NAME", arg)
	}
	for _, e := range simulator.Map.All("HostSystem") {
		h := e.(*simulator.HostSystem)
		if h.Name == key || h.Self.Value == key {
			simulator.Map.Update(h, []types.PropertyChange{
				{Name: "name", Val: name},
				{Name: "summary.config.name", Val: name},
			})
			return nil
		}
	}
	return fmt.Errorf("no host %q", key)
}

// withDasConfig applies the dasConfig of every ReconfigureComputeResource_Task that vcsim answered
// with success. govmomi 0.24's ClusterComputeResource.ReconfigureComputeResourceTask updates the
// rules, groups and VM overrides only (simulator/cluster_compute_resource.go), so without this a
// test could not turn vSphere HA on, or set its advanced options, the way an administrator does.
func withDasConfig(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, read := postBody(r)
		if !read {
			next.ServeHTTP(w, r)
			return
		}
		status := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(status, r)
		if req := reconfigureRequest(body); req != nil && status.status == http.StatusOK {
			applyDasConfig(req)
		}
	})
}

// postBody reads a POST's body and puts it back for the next handler; false for any other
// method, or when the body could not be read.
func postBody(r *http.Request) ([]byte, bool) {
	if r.Method != http.MethodPost {
		return nil, false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, err == nil
}

// reconfigureRequest is the SOAP body's ReconfigureComputeResource_Task, or nil.
func reconfigureRequest(body []byte) *types.ReconfigureComputeResource_Task {
	if !bytes.Contains(body, []byte("ReconfigureComputeResource_Task")) {
		return nil
	}
	method, err := simulator.UnmarshalBody(types.TypeFunc(), body)
	if err != nil {
		return nil
	}
	req, _ := method.Body.(*types.ReconfigureComputeResource_Task)
	return req
}

// withRuleEditsByKey makes a rule edit address the rule by its key, as vCenter does: the
// ClusterRuleInfo.key the server assigned identifies the rule an edit replaces, name included
// (terraform-provider-vsphere changes a DRS rule's name in place this way: its
// vsphere_compute_cluster_vm_anti_affinity_rule forces a new resource for a new cluster, not for
// a new name). govmomi's simulator (simulator/cluster_compute_resource.go updateRules, 0.24 and
// later) finds the rule to edit by name, so an edit that renames a rule is refused there. Here the
// rule of that key is renamed first, then vcsim applies the edit; a new name another rule already
// has is refused with InvalidArgument, as names are unique in a cluster.
func withRuleEditsByKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if body, read := postBody(r); read {
			if req := reconfigureRequest(body); req != nil {
				if taken := renameEditedRules(req); taken != "" {
					invalidArgument(w, "info.name", taken)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// renameEditedRules gives each rule an edit addresses by key the edit's name; it returns the first
// new name another rule of the cluster already has (nothing is renamed then).
func renameEditedRules(req *types.ReconfigureComputeResource_Task) string {
	spec, ok := req.Spec.(*types.ClusterConfigSpecEx)
	if !ok {
		return ""
	}
	cluster, ok := simulator.Map.Get(req.This).(*simulator.ClusterComputeResource)
	if !ok {
		return ""
	}
	taken := ""
	simulator.Map.WithLock(cluster, func() {
		config := cluster.ConfigurationEx.(*types.ClusterConfigInfoEx)
		renames := map[int]string{}
		for _, edit := range spec.RulesSpec {
			if edit.Operation != types.ArrayUpdateOperationEdit || edit.Info == nil {
				continue
			}
			info := edit.Info.GetClusterRuleInfo()
			for i, rule := range config.Rule {
				have := rule.GetClusterRuleInfo()
				if have.Name == info.Name && have.Key != info.Key && taken == "" {
					taken = info.Name
				}
				if have.Key == info.Key && have.Name != info.Name {
					renames[i] = info.Name
				}
			}
		}
		if taken != "" {
			return
		}
		for i, name := range renames {
			config.Rule[i].GetClusterRuleInfo().Name = name
		}
	})
	return taken
}

// invalidArgument answers a SOAP InvalidArgument fault, as vCenter does for a bad spec.
func invalidArgument(w http.ResponseWriter, property, value string) {
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body><soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>A specified parameter was not correct: %s (%s is taken)</faultstring><detail><InvalidArgumentFault xmlns="urn:vim25" xsi:type="InvalidArgument"><invalidProperty>%s</invalidProperty></InvalidArgumentFault></detail></soapenv:Fault></soapenv:Body></soapenv:Envelope>`,
		property, html.EscapeString(value), property)
}

// statusRecorder remembers the status code written, so only an accepted request is applied.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// applyDasConfig merges the spec's dasConfig into the cluster's configurationEx as vCenter does
// with modify=true (set fields replace, advanced options merge by key), or replaces it whole.
func applyDasConfig(req *types.ReconfigureComputeResource_Task) {
	spec, ok := req.Spec.(*types.ClusterConfigSpecEx)
	if !ok || spec.DasConfig == nil {
		return
	}
	cluster, ok := simulator.Map.Get(req.This).(*simulator.ClusterComputeResource)
	if !ok {
		return
	}
	simulator.Map.WithLock(cluster, func() {
		config := *cluster.ConfigurationEx.(*types.ClusterConfigInfoEx)
		das, in := config.DasConfig, spec.DasConfig
		if !req.Modify {
			das = types.ClusterDasConfigInfo{}
		}
		if in.Enabled != nil {
			das.Enabled = in.Enabled
		}
		if in.AdmissionControlEnabled != nil {
			das.AdmissionControlEnabled = in.AdmissionControlEnabled
		}
		if in.AdmissionControlPolicy != nil {
			das.AdmissionControlPolicy = in.AdmissionControlPolicy
		}
		if in.FailoverLevel != 0 {
			das.FailoverLevel = in.FailoverLevel
		}
		if in.HostMonitoring != "" {
			das.HostMonitoring = in.HostMonitoring
		}
		if in.VmMonitoring != "" {
			das.VmMonitoring = in.VmMonitoring
		}
		das.Option = mergeOptions(das.Option, in.Option)
		config.DasConfig = das
		simulator.Map.Update(cluster, []types.PropertyChange{{Name: "configurationEx", Val: &config}})
	})
}

// mergeOptions sets each of `in` in `have` by key, keeping the order options were first set in.
func mergeOptions(have, in []types.BaseOptionValue) []types.BaseOptionValue {
	out := append([]types.BaseOptionValue(nil), have...)
	for _, option := range in {
		key := option.GetOptionValue().Key
		replaced := false
		for i := range out {
			if out[i].GetOptionValue().Key == key {
				out[i], replaced = option, true
			}
		}
		if !replaced {
			out = append(out, option)
		}
	}
	return out
}

// slowMaintenance answers EnterMaintenanceMode_Task and ExitMaintenanceMode_Task itself, the way
// vCenter does, where vcsim 0.24 (simulator/host_system.go EnterMaintenanceModeTask) finishes the
// task before it answers and sets runtime.inMaintenanceMode without telling property collectors.
// Here the call returns a running task (in TaskManager.recentTask, descriptionId
// HostSystem.enterMaintenanceMode, as vCenter names it); the host enters maintenance mode `delay`
// later, through the registry so that WaitForUpdatesEx reports it, and the task then succeeds.
// Exit is immediate and reported. Every other request goes to vcsim untouched. The session is
// checked by its cookie only: vcsim's session table is not exported.
type slowMaintenance struct {
	next  http.Handler
	delay time.Duration
}

var maintenanceCall = regexp.MustCompile(`<(Enter|Exit)MaintenanceMode_Task\b[^>]*>\s*<_this[^>]*>([^<]+)</_this>`)

func (m *slowMaintenance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		m.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	found := maintenanceCall.FindSubmatch(body)
	if found == nil {
		m.next.ServeHTTP(w, r)
		return
	}
	ref := types.ManagedObjectReference{Type: "HostSystem", Value: string(found[2])}
	host, ok := simulator.Map.Get(ref).(*simulator.HostSystem)
	if _, err := r.Cookie("vmware_soap_session"); err != nil || !ok {
		m.next.ServeHTTP(w, r) // vcsim answers with its own fault
		return
	}
	entering := string(found[1]) == "Enter"
	name, delay := "exitMaintenanceMode", time.Duration(0)
	if entering {
		name, delay = "enterMaintenanceMode", m.delay
	}
	task := simulator.CreateTask(host, name, func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		time.Sleep(delay)
		simulator.Map.WithLock(host, func() {
			simulator.Map.Update(host, []types.PropertyChange{{Name: "runtime.inMaintenanceMode", Val: entering}})
		})
		return nil, nil
	})
	if entering {
		go task.Run()
	} else {
		task.Run()
	}
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body><%sMaintenanceMode_TaskResponse xmlns="urn:vim25"><returnval type="Task">%s</returnval></%sMaintenanceMode_TaskResponse></soapenv:Body></soapenv:Envelope>`,
		found[1], task.Self.Value, found[1])
}
