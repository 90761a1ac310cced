package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// Record is one line of a history file, as the end-to-end harness writes it
// (tests/e2e/src/history.rs): one operation of one client on one log, or a fault the
// harness injected. Times are nanoseconds on one monotonic clock; an operation whose
// outcome is unknown has no return time.
type Record struct {
	Client int    `json:"client"`
	Log    string `json:"log"`
	Call   int64  `json:"call"`
	Return *int64 `json:"return"`
	Op     string `json:"op"` // append, read, tail, trim, fault

	// append
	Value   string `json:"value,omitempty"`
	Count   int64  `json:"count,omitempty"`
	Outcome string `json:"outcome,omitempty"` // ok, unknown, failed
	Offset  *int64 `json:"offset,omitempty"`
	Error   string `json:"error,omitempty"`

	// read
	From    *int64     `json:"from,omitempty"`
	Marker  *int64     `json:"marker,omitempty"` // read: the trim marker it saw; trim: the stored marker
	Entries []ReadItem `json:"entries,omitempty"`
	ToEnd   bool       `json:"to_end,omitempty"`

	// tail
	First *int64 `json:"first,omitempty"`
	Next  *int64 `json:"next,omitempty"`

	// trim
	Through *int64 `json:"through,omitempty"`

	// fault
	What string `json:"what,omitempty"`
}

// ReadItem is one entry a read returned.
type ReadItem struct {
	Offset int64  `json:"offset"`
	Count  int64  `json:"count"`
	Value  string `json:"value"`
}

// History is a parsed history file.
type History struct {
	Records []Record
}

// ReadHistory parses a JSON-lines history; every line must be a valid record.
func ReadHistory(r io.Reader) (*History, error) {
	h := &History{}
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 1<<20), 1<<30)
	line := 0
	for scanner.Scan() {
		line++
		text := scanner.Bytes()
		if len(text) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(text, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		if err := rec.validate(); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		h.Records = append(h.Records, rec)
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	return h, nil
}

// ReadHistoryFile parses the history in the file at path.
func ReadHistoryFile(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return h, nil
}

func (r *Record) validate() error {
	need := func(ok bool, what string) error {
		if !ok {
			return fmt.Errorf("%s record without %s", r.Op, what)
		}
		return nil
	}
	if r.Op != "fault" && r.Log == "" {
		return fmt.Errorf("%s record without log", r.Op)
	}
	if r.Return != nil && *r.Return < r.Call {
		return fmt.Errorf("%s record returns (%d) before its call (%d)", r.Op, *r.Return, r.Call)
	}
	switch r.Op {
	case "append":
		if r.Count == 0 {
			r.Count = 1
		}
		switch r.Outcome {
		case "ok":
			return firstError(need(r.Offset != nil, "offset"), need(r.Return != nil, "return"), need(r.Value != "", "value"))
		case "unknown", "failed":
			return need(r.Value != "", "value")
		default:
			return fmt.Errorf("append record with outcome %q (ok, unknown or failed)", r.Outcome)
		}
	case "read":
		for i := range r.Entries {
			if r.Entries[i].Count == 0 {
				r.Entries[i].Count = 1
			}
		}
		return firstError(need(r.From != nil, "from"), need(r.Marker != nil, "marker"), need(r.Return != nil, "return"))
	case "tail":
		return firstError(need(r.First != nil, "first"), need(r.Next != nil, "next"), need(r.Return != nil, "return"))
	case "trim":
		switch r.Outcome {
		case "ok":
			return firstError(need(r.Through != nil, "through"), need(r.Marker != nil, "marker"), need(r.Return != nil, "return"))
		case "unknown", "failed":
			return need(r.Through != nil, "through")
		default:
			return fmt.Errorf("trim record with outcome %q (ok, unknown or failed)", r.Outcome)
		}
	case "fault":
		return need(r.What != "", "what")
	default:
		return fmt.Errorf("unknown op %q", r.Op)
	}
}

func firstError(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// WriteHistory writes records as JSON lines.
func WriteHistory(w io.Writer, records []Record) error {
	enc := json.NewEncoder(w)
	for i := range records {
		if err := enc.Encode(&records[i]); err != nil {
			return err
		}
	}
	return nil
}

// Logs returns the history's logs, sorted.
func (h *History) Logs() []string {
	seen := map[string]bool{}
	var logs []string
	for _, r := range h.Records {
		if r.Op != "fault" && !seen[r.Log] {
			seen[r.Log] = true
			logs = append(logs, r.Log)
		}
	}
	sort.Strings(logs)
	return logs
}

// Clone returns a deep copy, for mutations.
func (h *History) Clone() *History {
	out := &History{Records: make([]Record, len(h.Records))}
	copy(out.Records, h.Records)
	for i := range out.Records {
		out.Records[i].Entries = append([]ReadItem(nil), h.Records[i].Entries...)
	}
	return out
}

// returnTime is the record's return time, +infinity for an unknown outcome.
func (r *Record) returnTime() int64 {
	if r.Return == nil {
		return math.MaxInt64
	}
	return *r.Return
}

func i64(v int64) *int64 { return &v }
