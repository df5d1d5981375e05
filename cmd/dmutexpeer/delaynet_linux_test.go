package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// This file builds the network of TestDelayedNetwork: one network
// namespace per peer, each with a TUN device and one address, and a
// router in the test process that reads every packet a namespace sends
// and writes it into the destination's namespace after a fixed delay.
//
// The delay is kept in user space because the kernel this project's
// machines run has no netem qdisc (CONFIG_NET_SCH_NETEM is not set), nor
// fq, which would honour a departure time set by BPF: `tc qdisc add ...
// netem` answers "Specified qdisc kind is unknown". The peers' kernels
// still run real TCP between real addresses; only the wire is
// simulated, as netem on each namespace's egress would do it.

// delayAddr is peer i's address: 10.77.0.(i+1), in its namespace only.
func delayAddr(i int) net.IP { return net.IPv4(10, 77, 0, byte(i+1)).To4() }

// delayMissing says what this machine lacks for a delayed network, or ""
// if nothing.
func delayMissing() string {
	if os.Geteuid() != 0 {
		return "root (to create network namespaces)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "the ip command of iproute2"
	}
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return "/dev/net/tun: " + err.Error()
	}
	f.Close()
	name := fmt.Sprintf("dmxprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Sprintf("network namespaces (ip netns add: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns del: %v: %s", err, out)
	}
	return ""
}

// delayNet is n namespaces joined by the router.
type delayNet struct {
	names   []string   // the namespaces, peer i in names[i]
	tuns    []*os.File // each namespace's TUN device, opened here
	delay   time.Duration
	links   []chan packet // per pair from*n+to: packets on the wire, in order
	wg      sync.WaitGroup
	readers sync.WaitGroup
}

type packet struct {
	due time.Time
	b   []byte
}

// ip runs the ip command.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newDelayNet creates n namespaces named prefix-0 to prefix-(n-1) and
// starts the router; Close (registered with t.Cleanup by the caller)
// deletes them, whatever happened in between.
func newDelayNet(prefix string, n int, delay time.Duration) (_ *delayNet, err error) {
	d := &delayNet{delay: delay, links: make([]chan packet, n*n)}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close())
		}
	}()
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if err := ip("netns", "add", name); err != nil {
			return nil, err
		}
		d.names = append(d.names, name)
		var tun *os.File
		err := inNetns(name, func() (err error) {
			tun, err = openTUN("dmx0")
			return err
		})
		if err != nil {
			return nil, err
		}
		d.tuns = append(d.tuns, tun)
		for _, args := range [][]string{
			{"-n", name, "link", "set", "lo", "up"},
			{"-n", name, "addr", "add", delayAddr(i).String() + "/24", "dev", "dmx0"},
			{"-n", name, "link", "set", "dmx0", "up"},
		} {
			if err := ip(args...); err != nil {
				return nil, err
			}
		}
	}
	for i := range d.links {
		if i/n == i%n {
			continue
		}
		d.links[i] = make(chan packet, 4096)
		d.wg.Add(1)
		go d.wire(d.links[i], d.tuns[i%n])
	}
	for i := range n {
		d.readers.Add(1)
		go d.read(i)
	}
	return d, nil
}

// read takes every packet namespace from sends and puts it on the wire
// to its destination, due after the delay.
func (d *delayNet) read(from int) {
	defer d.readers.Done()
	n := len(d.tuns)
	buf := make([]byte, 1<<16)
	for {
		k, err := d.tuns[from].Read(buf)
		if err != nil {
			return // closed
		}
		now := time.Now()
		b := buf[:k]
		if k < 20 || b[0]>>4 != 4 || b[16] != 10 || b[17] != 77 || b[18] != 0 {
			continue // not IPv4 to a peer: router solicitations and the like
		}
		to := int(b[19]) - 1
		if to < 0 || to >= n || to == from {
			continue
		}
		select {
		case d.links[from*n+to] <- packet{due: now.Add(d.delay), b: copyBytes(b)}:
		default: // a full queue drops, as a real one would
		}
	}
}

func copyBytes(b []byte) []byte { return append([]byte(nil), b...) }

// wire delivers a link's packets in order, each at its due time.
func (d *delayNet) wire(link chan packet, to *os.File) {
	defer d.wg.Done()
	for p := range link {
		if w := time.Until(p.due); w > 0 {
			time.Sleep(w)
		}
		_, _ = to.Write(p.b) // fails only once the device is closed
	}
}

// Close stops the router and deletes the namespaces.
func (d *delayNet) Close() error {
	var errs []error
	for _, f := range d.tuns {
		errs = append(errs, f.Close())
	}
	d.readers.Wait()
	for _, l := range d.links {
		if l != nil {
			close(l)
		}
	}
	d.wg.Wait()
	for _, name := range d.names {
		errs = append(errs, ip("netns", "del", name))
	}
	return errors.Join(errs...)
}

// command returns a command that runs in peer i's namespace, killed
// when ctx is done (ip netns exec runs bin in its own process).
func (d *delayNet) command(ctx context.Context, i int, bin string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", d.names[i], bin}, args...)...)
}

// inNetns runs f on an OS thread that has entered namespace name: a
// socket or device f opens belongs to that namespace for good.
func inNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := f()
		if err := setns(orig); err != nil {
			// The thread stays locked, and ends with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("setns back: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setns(f *os.File) error { return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET) }

// openTUN creates TUN device name (IP packets, no header) in the
// calling thread's namespace and returns it, non-blocking so that
// Close stops a Read.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	req, err := unix.NewIfreq(name)
	if err == nil {
		req.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, req)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

// oneWay measures the one-way delay between peers 0 and 1 as half the
// median round trip of one byte each way over TCP, rounds times.
func (d *delayNet) oneWay(rounds int) (time.Duration, error) {
	var lis net.Listener
	addr := net.JoinHostPort(delayAddr(1).String(), "6999")
	if err := inNetns(d.names[1], func() (err error) {
		lis, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return 0, err
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		done <- err
	}()
	var c net.Conn
	if err := inNetns(d.names[0], func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 10*time.Second)
		return err
	}); err != nil {
		lis.Close()
		<-done
		return 0, err
	}
	rtts := make([]float64, 0, rounds)
	b := []byte{1}
	var err error
	for range rounds {
		start := time.Now()
		if _, err = c.Write(b); err != nil {
			break
		}
		if _, err = io.ReadFull(c, b); err != nil {
			break
		}
		rtts = append(rtts, float64(time.Since(start)))
	}
	c.Close()
	err = errors.Join(err, <-done)
	if err != nil {
		return 0, err
	}
	return time.Duration(median(rtts) / 2), nil
}
