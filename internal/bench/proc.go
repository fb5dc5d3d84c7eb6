package bench

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux the kernel exports it for).
const userHZ = 100

// procStatusBytes reads a "kB" field of /proc/<pid>/status (VmRSS, VmHWM)
// in bytes; pid 0 reads this process's. 0 if it cannot.
func procStatusBytes(pid int, field string) uint64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest) // "123456 kB"
			if len(f) >= 1 {
				kb, err := strconv.ParseUint(f[0], 10, 64)
				if err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
}

// procHWM reads a process's peak resident set (VmHWM) in bytes, 0 if it
// cannot.
func procHWM(pid int) uint64 { return procStatusBytes(pid, "VmHWM") }

// procCPU reads the CPU time (user + system, all threads) a child process
// has used so far from /proc/<pid>/stat, to 10 ms; 0 if it cannot.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted after its closing one, from field 3 (state).
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * time.Second / userHZ
}

// child is a process the bench runs (a spendgate replica, redis-server),
// its output in a file. It dies with the bench process (Pdeathsig).
type child struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	mu      sync.Mutex
	err     error
}

// startChild starts path with args, stdout and stderr to logPath
// (appended).
func startChild(path, logPath string, args ...string) (*child, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	c := &child{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		_ = out.Close()
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exitErr is how the process ended, once done is closed.
func (c *child) exitErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// stop sends sig and waits up to within for the process to exit; then it
// kills it. It returns how long the exit took and the process's error
// (a SIGKILL's "signal: killed" included).
func (c *child) stop(sig syscall.Signal, within time.Duration) (time.Duration, error) {
	start := time.Now()
	select {
	case <-c.done:
		return 0, c.exitErr()
	default:
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
		return time.Since(start), c.exitErr()
	case <-time.After(within):
		_ = c.cmd.Process.Kill()
		<-c.done
		return time.Since(start), fmt.Errorf("did not exit within %s of %s: killed", within, sig)
	}
}

// logTail is the last n bytes of the child's output, for an error message.
func (c *child) logTail(n int) string {
	data, err := os.ReadFile(c.logPath)
	if err != nil {
		return ""
	}
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}
