// Command pause is the lab's pod sandbox: it holds a pod's namespaces open and does nothing else.
//
// Written for rackctl's lab (upstream's pause is C, built outside Go modules): it reaps the children that
// are re-parented to it as a pod's init process, and exits cleanly on SIGINT or SIGTERM, as the kubelet
// expects of a sandbox.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (rackctl lab)")
		return
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
