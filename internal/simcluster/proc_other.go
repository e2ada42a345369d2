//go:build !linux

package simcluster

import "syscall"

// childAttr: no parent-death signal outside Linux; stop ends the process.
func childAttr() *syscall.SysProcAttr { return nil }
