package simcluster

import "syscall"

// childAttr makes the server process die with the simulation, even one
// killed with SIGKILL (no orphaned etcd holding its ports and data dir).
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
