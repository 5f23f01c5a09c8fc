package prefault

import (
	"syscall"
	"time"
	"unsafe"
)

const (
	madvPopulateRead  = 22 // MADV_POPULATE_READ, Linux 5.14; older kernels: EINVAL, ignored
	madvPopulateWrite = 23 // MADV_POPULATE_WRITE
	ptLoad            = 1
	ptPhdr            = 6
	pfW               = 2
	atPhdr, atPhnum   = 3, 5
	page              = 4096
	// heapSpan: the heap a worker touches before its first task, and a bit; mapped
	// heapStep at a time
	heapSpan, heapStep = 1536 << 10, 256 << 10
	// bssSpan: the zeroed data after the initialised data that a start touches
	bssSpan = 256 << 10
	// slowFault: a page fault that takes this long or more makes the mapping pay. Where
	// a fault costs 20-30 µs (a virtual machine whose page-table updates trap), mapping
	// the pages at once took 0.4-5 ms off a worker's start; where one costs ~1.5 µs,
	// the mapping itself (~2.2 ms for this binary) cost the start ~1 ms more than the
	// faults it saved.
	slowFault = 5 * time.Microsecond
)

// elfPhdr is an ELF64 program header.
type elfPhdr struct {
	typ, flags                          uint32
	off, vaddr, paddr, filesz, memsz, _ uint64
}

var sink *[64]byte

func init() {
	if Enabled(syscall.Getenv(Variable)) && slow(faultCost()) {
		run()
	}
}

// slow reports whether a page fault that takes d makes the mapping pay.
func slow(d time.Duration) bool { return d >= slowFault }

// faultCost is how long a page fault takes here: the least of three first writes to
// fresh anonymous pages (a few microseconds spent; the maximum duration when no pages
// could be mapped to try, so that the mapping is done as before).
func faultCost() time.Duration {
	b, err := syscall.Mmap(-1, 0, 3*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return 1<<63 - 1
	}
	least := time.Duration(1<<63 - 1)
	for i := range 3 {
		t := time.Now()
		b[i*page] = 1
		least = min(least, time.Since(t))
	}
	_ = syscall.Munmap(b)
	return least
}

// run maps the pages (see the package's documentation).
func run() {
	for _, g := range segments() {
		if g.writable {
			populate(g.start, min(g.end, g.fileEnd+bssSpan), madvPopulateWrite)
		} else {
			populate(g.start, g.end, madvPopulateRead)
		}
	}
	sink = new([64]byte)
	start := uintptr(unsafe.Pointer(sink)) &^ (page - 1)
	sink = nil
	// the heap is mapped a few megabytes at a time: stop where its mapping ends
	for off := uintptr(0); off < heapSpan; off += heapStep {
		if !populate(start+off, start+off+heapStep, madvPopulateWrite) {
			break
		}
	}
}

// segment is a loaded segment of the executable, in memory: [start, end), its data from
// the file up to fileEnd (the rest zeroed).
type segment struct {
	start, fileEnd, end uintptr
	writable            bool
}

// segments lists the executable's loaded segments (none when its program headers
// cannot be read).
func segments() []segment {
	phdr, n := programHeaders()
	if phdr == nil {
		return nil
	}
	hs := unsafe.Slice((*elfPhdr)(phdr), n)
	// the load bias (0 for a non-PIE executable): where the headers are, less where the
	// segment holding them says they are
	var bias uintptr
	for _, h := range hs {
		if h.typ == ptPhdr {
			bias = uintptr(phdr) - uintptr(h.vaddr)
		}
	}
	var out []segment
	for _, h := range hs {
		if h.typ == ptLoad {
			lo := bias + uintptr(h.vaddr)
			out = append(out, segment{start: lo &^ (page - 1), fileEnd: lo + uintptr(h.filesz),
				end: lo + uintptr(h.memsz), writable: h.flags&pfW != 0})
		}
	}
	return out
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
