package main

import (
	"syscall"
	"unsafe"
)

const canBindCPU = true

// bindCPU binds the calling thread to cpu (sched_setaffinity).
func bindCPU(cpu int) bool {
	var mask [16]uint64 // 1024 CPUs
	if cpu >= 64*len(mask) {
		return false
	}
	mask[cpu/64] |= 1 << (cpu % 64)
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, uintptr(len(mask)*8), uintptr(unsafe.Pointer(&mask[0])))
	return e == 0
}
