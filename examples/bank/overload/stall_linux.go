package main

import (
	"syscall"
	"unsafe"
)

const canBindCPU = true

// bindCPU binds the calling thread to cpu (sched_setaffinity), if it can.
func bindCPU(cpu int) {
	var mask [16]uint64 // 1024 CPUs
	if cpu >= 64*len(mask) {
		return
	}
	mask[cpu/64] |= 1 << (cpu % 64)
	syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, uintptr(len(mask)*8), uintptr(unsafe.Pointer(&mask[0])))
}
