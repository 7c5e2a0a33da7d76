// Command flannel is the lab's CNI plugin of type "flannel": it reads the subnet flanneld leased to this node
// and hands the pod's interface to the bridge plugin with host-local addresses from that subnet.
//
// Written for rackctl's lab: upstream's plugin (github.com/flannel-io/cni-plugin) is not served by the Go
// module proxy the lab builds from. It keeps the contract flannel documents for its plugin: the network
// config's "delegate" object is the delegate's config, "subnetFile" (default /run/flannel/subnet.env)
// gives FLANNEL_NETWORK, FLANNEL_SUBNET, FLANNEL_MTU and FLANNEL_IPMASQ, and the config handed to the
// delegate on ADD is kept under "dataDir" (default /var/lib/cni/flannel) for DEL and CHECK. Standard
// library only.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

const (
	defaultSubnetFile = "/run/flannel/subnet.env"
	defaultDataDir    = "/var/lib/cni/flannel"
)

var supported = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

type netConf struct {
	CNIVersion string         `json:"cniVersion"`
	Name       string         `json:"name"`
	SubnetFile string         `json:"subnetFile"`
	DataDir    string         `json:"dataDir"`
	Delegate   map[string]any `json:"delegate"`
}

type lease struct {
	network, subnet string
	mtu             int
	ipMasq          bool
}

// cniError is the error object the CNI spec asks a plugin to print on failure.
type cniError struct {
	CNIVersion string `json:"cniVersion"`
	Code       int    `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`
}

func fail(version string, code int, msg string, err error) {
	out := cniError{CNIVersion: version, Code: code, Msg: msg}
	if err != nil {
		out.Details = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(1)
}

func readLease(path string) (lease, error) {
	f, err := os.Open(path)
	if err != nil {
		return lease{}, err
	}
	defer f.Close()
	values := map[string]string{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		key, value, ok := strings.Cut(strings.TrimSpace(scanner.Text()), "=")
		if ok {
			values[key] = value
		}
	}
	if err := scanner.Err(); err != nil {
		return lease{}, err
	}
	out := lease{network: values["FLANNEL_NETWORK"]}
	if out.network == "" || values["FLANNEL_SUBNET"] == "" {
		return lease{}, fmt.Errorf("%s: FLANNEL_NETWORK or FLANNEL_SUBNET missing", path)
	}
	// flanneld writes the node's gateway address with the subnet's length (10.244.2.1/24); host-local
	// takes the subnet itself
	_, subnet, err := net.ParseCIDR(values["FLANNEL_SUBNET"])
	if err != nil {
		return lease{}, fmt.Errorf("%s: FLANNEL_SUBNET: %w", path, err)
	}
	out.subnet = subnet.String()
	if mtu, err := strconv.Atoi(values["FLANNEL_MTU"]); err == nil {
		out.mtu = mtu
	}
	out.ipMasq = values["FLANNEL_IPMASQ"] == "true"
	return out, nil
}

// delegateConf is what the bridge plugin (or the delegate's own "type") is given for this pod.
func delegateConf(conf netConf, l lease) map[string]any {
	d := map[string]any{}
	for k, v := range conf.Delegate {
		d[k] = v
	}
	d["name"] = conf.Name
	d["cniVersion"] = conf.CNIVersion
	if _, ok := d["type"]; !ok {
		d["type"] = "bridge"
	}
	if d["type"] == "bridge" {
		if _, ok := d["isGateway"]; !ok {
			d["isGateway"] = true
		}
	}
	if _, ok := d["ipMasq"]; !ok {
		d["ipMasq"] = !l.ipMasq // flanneld masquerades itself when it was started with --ip-masq
	}
	if _, ok := d["mtu"]; !ok && l.mtu > 0 {
		d["mtu"] = l.mtu
	}
	ipam, _ := d["ipam"].(map[string]any)
	if ipam == nil {
		ipam = map[string]any{}
	}
	if _, ok := ipam["type"]; !ok {
		ipam["type"] = "host-local"
	}
	ipam["ranges"] = []any{[]any{map[string]any{"subnet": l.subnet}}}
	ipam["routes"] = []any{map[string]any{"dst": l.network}}
	d["ipam"] = ipam
	return d
}

// run executes the delegate plugin found on CNI_PATH with the same environment; its stdout becomes ours.
func run(d map[string]any) error {
	kind, _ := d["type"].(string)
	var binary string
	for _, dir := range filepath.SplitList(os.Getenv("CNI_PATH")) {
		candidate := filepath.Join(dir, kind)
		if info, err := os.Stat(candidate); err == nil && !info.IsDir() {
			binary = candidate
			break
		}
	}
	if binary == "" {
		return fmt.Errorf("delegate plugin %q not found in CNI_PATH %q", kind, os.Getenv("CNI_PATH"))
	}
	stdin, err := json.Marshal(d)
	if err != nil {
		return err
	}
	cmd := exec.Command(binary)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode()) // the delegate printed its own error object
		}
		return err
	}
	return nil
}

func saved(conf netConf) string {
	dir := conf.DataDir
	if dir == "" {
		dir = defaultDataDir
	}
	return filepath.Join(dir, os.Getenv("CNI_CONTAINERID"))
}

func load(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := map[string]any{}
	return d, json.Unmarshal(data, &d)
}

func main() {
	command := os.Getenv("CNI_COMMAND")
	if command == "VERSION" {
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.1.0", "supportedVersions": supported})
		return
	}
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("1.1.0", 4, "reading the network config", err)
	}
	var conf netConf
	if err := json.Unmarshal(input, &conf); err != nil {
		fail("1.1.0", 6, "decoding the network config", err)
	}
	subnetFile := conf.SubnetFile
	if subnetFile == "" {
		subnetFile = defaultSubnetFile
	}
	switch command {
	case "ADD":
		l, err := readLease(subnetFile)
		if err != nil {
			fail(conf.CNIVersion, 11, "flanneld has not written this node's subnet yet", err)
		}
		d := delegateConf(conf, l)
		data, _ := json.Marshal(d)
		path := saved(conf)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			fail(conf.CNIVersion, 999, "keeping the delegate's config", err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			fail(conf.CNIVersion, 999, "keeping the delegate's config", err)
		}
		if err := run(d); err != nil {
			fail(conf.CNIVersion, 999, "running the delegate", err)
		}
	case "DEL", "CHECK":
		path := saved(conf)
		d, err := load(path)
		if errors.Is(err, os.ErrNotExist) {
			if command == "DEL" {
				return // nothing was added (or it was deleted already): DEL must succeed
			}
			fail(conf.CNIVersion, 999, "no delegate config kept for this container", err)
		}
		if err != nil {
			fail(conf.CNIVersion, 999, "reading the delegate's config", err)
		}
		if err := run(d); err != nil {
			fail(conf.CNIVersion, 999, "running the delegate", err)
		}
		if command == "DEL" {
			_ = os.Remove(path)
		}
	case "STATUS":
		if _, err := readLease(subnetFile); err != nil {
			fail(conf.CNIVersion, 50, "flanneld has not written this node's subnet yet", err)
		}
	case "GC":
		// the kept configs are removed by DEL; nothing else to collect
	default:
		fail(conf.CNIVersion, 4, fmt.Sprintf("unknown CNI_COMMAND %q", command), nil)
	}
}
