// Command hostaffinity-vcsim runs govmomi's vCenter simulator with an inventory shaped for
// hostaffinity's tests: one datacenter, N clusters of M hosts, and node VMs spread round-robin over
// every host, named so that a test (or the dev command) can match them to Kubernetes nodes.
//
// It prints one line "VCSIM_URL=<url>" once the inventory is ready, then serves until SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (port 0 picks a free port)")
	clusters := flag.Int("clusters", 1, "number of clusters in the datacenter")
	hosts := flag.Int("hosts", 3, "ESXi hosts per cluster")
	vms := flag.Int("vms", 6, "node VMs, spread round-robin over all hosts")
	prefix := flag.String("vm-prefix", "node-", "VM name prefix; VMs are <prefix>1 .. <prefix>N")
	names := flag.String("vm-names", "", "comma-separated VM names (overrides -vms and -vm-prefix)")
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

	model.Service.Listen = &url.URL{Host: *listen}
	server := model.Service.NewServer()
	defer server.Close()

	vmNames := nodeNames(*names, *prefix, *vms)
	if err := createNodeVMs(server.URL, vmNames); err != nil {
		log.Fatalf("create node VMs: %v", err)
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

// createNodeVMs creates powered-on VMs through the SOAP API, as a real client would, placing the
// i-th VM on the i-th host (mod the host count) in that host's cluster resource pool.
func createNodeVMs(u *url.URL, names []string) error {
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
	for i, name := range names {
		host := allHosts[i%len(allHosts)]
		pool, err := host.ResourcePool(ctx)
		if err != nil {
			return err
		}
		spec := types.VirtualMachineConfigSpec{
			Name:    name,
			GuestId: string(types.VirtualMachineGuestOsIdentifierOtherGuest),
			Files:   &types.VirtualMachineFileInfo{VmPathName: "[LocalDS_0]"},
		}
		task, err := folders.VmFolder.CreateVM(ctx, spec, pool, host)
		if err != nil {
			return err
		}
		info, err := task.WaitForResult(ctx, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		vm := object.NewVirtualMachine(client.Client, info.Result.(types.ManagedObjectReference))
		if _, err := vm.PowerOn(ctx); err != nil {
			return err
		}
	}
	return nil
}
