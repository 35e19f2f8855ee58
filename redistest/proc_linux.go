//go:build linux

package redistest

import "syscall"

// sysProcAttr puts the server in its own process group and asks the kernel
// to kill it if the test binary dies without running its cleanups (for
// example on a go test -timeout panic).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
