// Command influx-suite runs the cases of InfluxDB 1.8's tests/server_test.go
// against a server over HTTP and counts them one by one.
//
// The cases run through the suite's own remote mode (URL= on the test
// binary built from the upstream source, see scripts/influx-suite/run.sh):
// each test function resets the server, writes its points and checks each
// query's JSON answer in a subtest. This program only drives that binary
// and reads its test2json events, so what is checked is exactly what the
// upstream suite checks.
//
// A case is a leaf test: a subtest (one query, mostly), or a test function
// without subtests. The binary runs with -test.parallel=1 (the tests share
// one remote server and each one drops every database first). If the binary
// dies (a panic in a test on an unexpected answer, a timeout), the test that
// was running is recorded as crashed and the binary runs again for the tests
// not finished yet.
//
// With -reference (the results of a run against a real influxd), the cases
// counted are the ones that pass there: passed = those that pass here too,
// failed = the others (failed, crashed, skipped or never reached).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// skip names test functions not run (-skip): they count as not reached.
var skip string

// event is one line of `go tool test2json` output.
type event struct {
	Action string
	Test   string
	Output string
}

// run holds what one or more invocations of the test binary reported.
type run struct {
	outcome map[string]string   // test name -> pass | fail | skip | crash
	output  map[string][]string // test name -> its output lines
	started map[string]bool     // every test name seen
	active  string              // top-level test running or last continued
}

func newRun() *run {
	return &run{outcome: map[string]string{}, output: map[string][]string{}, started: map[string]bool{}}
}

func topLevel(name string) string {
	if i := strings.IndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return name
}

// apply folds one event into the run.
func (r *run) apply(e event) {
	if e.Test == "" {
		return
	}
	switch e.Action {
	case "run", "cont":
		r.started[e.Test] = true
		r.active = topLevel(e.Test)
	case "pass", "fail", "skip":
		r.outcome[e.Test] = e.Action
	case "output":
		r.output[e.Test] = append(r.output[e.Test], e.Output)
	}
}

// crashed marks the test that was running when the binary died, and its
// started subtests that did not finish, as crashed.
func (r *run) crashed() string {
	if r.active == "" || r.outcome[r.active] != "" {
		return ""
	}
	for name := range r.started {
		if topLevel(name) == r.active && r.outcome[name] == "" {
			r.outcome[name] = "crash"
		}
	}
	return r.active
}

// leaves are the tests without subtests, with their outcome.
func (r *run) leaves() map[string]string {
	parent := map[string]bool{}
	for name := range r.outcome {
		for i, c := range name {
			if c == '/' {
				parent[name[:i]] = true
			}
		}
	}
	out := map[string]string{}
	for name, o := range r.outcome {
		if !parent[name] {
			out[name] = o
		}
	}
	return out
}

// invoke runs the test binary once for the given test functions.
func invoke(bin, url string, tests []string, timeout string, raw io.Writer, r *run) error {
	pattern := "^(" + strings.Join(tests, "|") + ")$"
	cmd := exec.Command("go", "tool", "test2json", "-t", bin, "-test.v=test2json",
		"-test.parallel=1", "-test.timeout="+timeout, "-test.run="+pattern)
	if skip != "" {
		cmd.Args = append(cmd.Args, "-test.skip="+skip)
	}
	cmd.Env = append(os.Environ(), "URL="+url)
	cmd.Stderr = raw
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if e.Action == "output" {
			fmt.Fprint(raw, e.Output)
		}
		r.apply(e)
	}
	_ = cmd.Wait() // a failing test exits non-zero; the events tell what happened
	return nil
}

// runAll runs every test function, again after a crash for the ones left.
func runAll(bin, url string, tests []string, timeout string, raw io.Writer) (*run, error) {
	r := newRun()
	left := tests
	for len(left) > 0 {
		r.active = ""
		if err := invoke(bin, url, left, timeout, raw, r); err != nil {
			return nil, err
		}
		crashed := r.crashed()
		var next []string
		for _, t := range left {
			if r.outcome[t] == "" {
				next = append(next, t)
			}
		}
		if len(next) == len(left) && crashed == "" {
			for _, t := range next {
				r.outcome[t] = "crash"
				r.output[t] = append(r.output[t], "not run: the test binary stopped before it\n")
			}
			break
		}
		if crashed != "" {
			fmt.Fprintf(os.Stderr, "influx-suite: %s crashed the test binary; running the %d tests left\n", crashed, len(next))
		}
		left = next
	}
	return r, nil
}

func readLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, nil
}

// readResults reads a results.tsv: "<outcome>\t<case>" per line.
func readResults(path string) (map[string]string, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range lines {
		parts := strings.SplitN(l, "\t", 2)
		if len(parts) == 2 {
			out[parts[1]] = parts[0]
		}
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func writeResults(path string, leaves map[string]string) error {
	var b strings.Builder
	for _, k := range sortedKeys(leaves) {
		fmt.Fprintf(&b, "%s\t%s\n", leaves[k], k)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// failureText is what the suite printed for a case, without test2json's
// framing lines.
var framing = regexp.MustCompile(`^(=== (RUN|PAUSE|CONT|NAME)|--- (PASS|FAIL|SKIP))`)

func failureText(r *run, name string) string {
	var b strings.Builder
	for _, l := range r.output[name] {
		if !framing.MatchString(strings.TrimSpace(l)) {
			b.WriteString(l)
		}
	}
	return b.String()
}

type tally struct {
	passed, total int
	failures      []string
	byTest        map[string]int
}

// count compares the leaves with the reference's passing cases (or, with
// no reference, counts every leaf that did not skip).
func count(leaves, reference map[string]string) tally {
	t := tally{byTest: map[string]int{}}
	cases := map[string]string{}
	if reference == nil {
		for k, o := range leaves {
			if o != "skip" {
				cases[k] = o
			}
		}
	} else {
		for k, o := range reference {
			if o == "pass" {
				cases[k] = leaves[k]
			}
		}
	}
	for _, k := range sortedKeys(cases) {
		t.total++
		if cases[k] == "pass" {
			t.passed++
			continue
		}
		t.failures = append(t.failures, k)
		t.byTest[topLevel(k)]++
	}
	return t
}

func writeFailures(path string, t tally, leaves map[string]string, r *run) error {
	var b strings.Builder
	for _, k := range t.failures {
		o := leaves[k]
		if o == "" {
			o = "not reached"
		}
		fmt.Fprintf(&b, "== %s (%s)\n%s\n", k, o, failureText(r, k))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func main() {
	bin := flag.String("bin", "", "the tests.test binary built from InfluxDB's tests package")
	url := flag.String("url", "", "the server's base URL, e.g. http://127.0.0.1:8086")
	list := flag.String("tests", "", "file naming the test functions to run, one per line")
	out := flag.String("out", "", "directory for results.tsv, failures.txt and raw.log")
	refPath := flag.String("reference", "", "results.tsv of a run against influxd: the cases counted")
	timeout := flag.String("timeout", "20m", "time limit of one run of the test binary")
	flag.StringVar(&skip, "skip", "", "regexp of test functions not to run (they count as failed)")
	flag.Parse()
	if *bin == "" || *url == "" || *list == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := mainErr(*bin, *url, *list, *out, *refPath, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "influx-suite:", err)
		os.Exit(2)
	}
}

func mainErr(bin, url, list, out, refPath, timeout string) error {
	tests, err := readLines(list)
	if err != nil {
		return err
	}
	var reference map[string]string
	if refPath != "" {
		if reference, err = readResults(refPath); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	raw, err := os.Create(filepath.Join(out, "raw.log"))
	if err != nil {
		return err
	}
	defer raw.Close()
	r, err := runAll(bin, url, tests, timeout, raw)
	if err != nil {
		return err
	}
	leaves := r.leaves()
	if err := writeResults(filepath.Join(out, "results.tsv"), leaves); err != nil {
		return err
	}
	t := count(leaves, reference)
	if err := writeFailures(filepath.Join(out, "failures.txt"), t, leaves, r); err != nil {
		return err
	}
	printSummary(t, out)
	return nil
}

func printSummary(t tally, out string) {
	type kv struct {
		k string
		v int
	}
	var byTest []kv
	for k, v := range t.byTest {
		byTest = append(byTest, kv{k, v})
	}
	sort.Slice(byTest, func(i, j int) bool {
		if byTest[i].v != byTest[j].v {
			return byTest[i].v > byTest[j].v
		}
		return byTest[i].k < byTest[j].k
	})
	if len(byTest) > 0 {
		fmt.Println("failed cases by test function:")
		for _, e := range byTest {
			fmt.Printf("  %4d %s\n", e.v, e.k)
		}
		fmt.Printf("each failure with the suite's message: %s\n", filepath.Join(out, "failures.txt"))
	}
	fmt.Printf("influx_suite passed=%d failed=%d total=%d\n", t.passed, t.total-t.passed, t.total)
}
