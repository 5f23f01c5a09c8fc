package prefault

import (
	"syscall"
	"unsafe"
)

const (
	madvPopulateRead  = 22 // MADV_POPULATE_READ, Linux 5.14; older kernels: EINVAL, ignored
	madvPopulateWrite = 23 // MADV_POPULATE_WRITE
	ptLoad            = 1
	pfW               = 2
	atPhdr, atPhnum   = 3, 5
	page              = 4096
	// heapSpan: the heap a worker touches before its first task, and a bit
	heapSpan = 1536 << 10
	// bssSpan: the zeroed data after the initialised data that a start touches
	bssSpan = 256 << 10
)

// elfPhdr is an ELF64 program header.
type elfPhdr struct {
	typ, flags                          uint32
	off, vaddr, paddr, filesz, memsz, _ uint64
}

var sink *[64]byte

func init() {
	if Enabled(syscall.Getenv(Variable)) {
		run()
	}
}

// run maps the pages (see the package's documentation).
func run() {
	if phdr, n := programHeaders(); phdr != nil {
		hs := unsafe.Slice((*elfPhdr)(phdr), n)
		// the load bias (0 for a non-PIE executable): where the headers are, less where
		// the segment holding them says they are
		var bias uintptr
		for _, h := range hs {
			if h.typ == 6 { // PT_PHDR
				bias = uintptr(phdr) - uintptr(h.vaddr)
			}
		}
		for _, h := range hs {
			if h.typ != ptLoad {
				continue
			}
			start := (bias + uintptr(h.vaddr)) &^ (page - 1)
			if h.flags&pfW == 0 {
				populate(start, bias+uintptr(h.vaddr+h.memsz), madvPopulateRead)
			} else {
				populate(start, bias+uintptr(h.vaddr+min(h.memsz, h.filesz+bssSpan)), madvPopulateWrite)
			}
		}
	}
	sink = new([64]byte)
	start := uintptr(unsafe.Pointer(sink)) &^ (page - 1)
	sink = nil
	// the heap is mapped a few megabytes at a time: stop where its mapping ends
	for off := uintptr(0); off < heapSpan; off += 256 << 10 {
		if !populate(start+off, start+off+256<<10, madvPopulateWrite) {
			break
		}
	}
}

// populate maps the pages of [start, end), rounded out to pages; false when the kernel
// refused (no such advice, or a range not mapped so).
func populate(start, end uintptr, advice int) bool {
	end = (end + page - 1) &^ (page - 1)
	if end <= start {
		return true
	}
	_, _, e := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, uintptr(advice))
	return e == 0
}

// programHeaders finds the executable's program headers in memory from the auxiliary
// vector (nil when it cannot be read).
func programHeaders() (unsafe.Pointer, int) {
	fd, err := syscall.Open("/proc/self/auxv", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0
	}
	defer syscall.Close(fd)
	var buf [512]uint64
	n, err := syscall.Read(fd, unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8))
	if err != nil {
		return nil, 0
	}
	var phdr unsafe.Pointer
	var phnum int
	for i := 0; i+1 < n/8; i += 2 {
		switch buf[i] {
		case atPhdr:
			phdr = *(*unsafe.Pointer)(unsafe.Pointer(&buf[i+1]))
		case atPhnum:
			phnum = int(buf[i+1])
		}
	}
	if phnum == 0 || phnum > 64 {
		return nil, 0
	}
	return phdr, phnum
}
