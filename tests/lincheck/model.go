package main

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The sequential specification of one log (a stream's partition), after the storage spec
// and docs/api.md:
//
//   - append(v, n) puts an entry of n records at the log's end and answers its offset;
//   - read(o) answers whole entries from o' = max(o, B): the first holds o', each follows the
//     previous one, each is the entry the log holds at its offset; nothing when o' is at or
//     past the end (a read that says it reached the end must end exactly there);
//   - tail() answers (first, next): next is the end of the log;
//   - trim(t) advances the trim marker B to at most t + 1 and answers the marker stored.
//
// The marker is checked as an upper bound: a soft trim stops at the start of the log's last
// index record, which the history cannot see, and a read's marker is read before its
// entries. So the model keeps the greatest marker any trim may have stored, every marker
// observed must lie at or below it, and markers that go backwards in real time are found
// by a separate check (markerRegressions). Entries are never forgotten by the model: a
// trimmed entry that is still read must still be the one appended.

// unreadValue stands for the value of an entry no read returned: which of the appends that
// may have written it did is unobservable, and states that differ only in that are equal.
const unreadValue = "(unread)"

// entry is one entry of the log.
type entry struct {
	offset, count int64
	value         string
}

// node is the last entry of a log, linked to the entries before it: states share their
// prefixes, so a step costs O(1) and states compare in O(length of the difference).
type node struct {
	e    entry
	prev *node
	hash uint64
}

// logState is the model's state.
type logState struct {
	tail  *node
	end   int64 // the next offset
	bound int64 // the greatest trim marker a trim may have stored
	// How many appends of unknown outcome whose entry was never read have been linearized
	// (see step).
	filled int
}

type opKind int

const (
	opAppend opKind = iota
	opRead
	opTail
	opTrim
)

// input is what a client asked.
type input struct {
	kind    opKind
	value   string // append
	count   int64  // append
	from    int64  // read
	through int64  // trim
	// An append of unknown outcome whose entry no read returned: the offsets no read
	// covered and no acknowledgement names, the only places it can have taken effect.
	free *freeOffsets
	// Its rank by call time among those appends, when they all have one record (else -1):
	// they write free offsets in that order (see step).
	rank int
}

// freeOffsets are the offsets below the log's end that no read returned and no
// acknowledged append names, as sorted, disjoint [start, end) spans. Some append of unknown
// outcome whose entry was never read must have written each of them: the log is dense.
type freeOffsets struct {
	spans [][2]int64
}

// holds reports whether [start, start+count) lies inside one free span.
func (f *freeOffsets) holds(start, count int64) bool {
	for _, s := range f.spans {
		if start >= s[0] && start+count <= s[1] {
			return true
		}
	}
	return false
}

// past reports whether offset lies beyond every free span.
func (f *freeOffsets) past(offset int64) bool {
	return len(f.spans) == 0 || offset >= f.spans[len(f.spans)-1][1]
}

// output is what it was answered.
type output struct {
	unknown bool  // append or trim: the outcome is unknown
	offset  int64 // append (also an unknown append whose entry was read, see inferUnknown)
	// read
	marker  int64
	entries []ReadItem
	toEnd   bool
	// tail
	first, next int64
	// trim: marker
}

func hashEntry(prev uint64, e entry) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%s/%d", e.offset, e.count, e.value, prev)
	return h.Sum64()
}

func (s logState) appendEntry(e entry) logState {
	var prevHash uint64
	if s.tail != nil {
		prevHash = s.tail.hash
	}
	n := &node{e: e, prev: s.tail, hash: hashEntry(prevHash, e)}
	return logState{tail: n, end: e.offset + e.count, bound: s.bound, filled: s.filled}
}

// at returns the node of the entry starting at offset, or nil.
func (s logState) at(offset int64) *node {
	for n := s.tail; n != nil; n = n.prev {
		if n.e.offset == offset {
			return n
		}
		if n.e.offset < offset {
			return nil
		}
	}
	return nil
}

func sameList(a, b *node) bool {
	for a != b {
		if a == nil || b == nil || a.hash != b.hash || a.e != b.e {
			return false
		}
		a, b = a.prev, b.prev
	}
	return true
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func min64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

// matches reports whether the read's entries are the log's entries from o', contiguous.
func (s logState) matches(oPrime int64, items []ReadItem, toEnd bool) bool {
	if len(items) == 0 {
		return oPrime >= s.end
	}
	first := items[0]
	if first.Offset > oPrime || first.Offset+first.Count <= oPrime {
		return false
	}
	for i := 1; i < len(items); i++ {
		if items[i].Offset != items[i-1].Offset+items[i-1].Count {
			return false
		}
	}
	last := items[len(items)-1]
	end := last.Offset + last.Count
	if end > s.end || (toEnd && end != s.end) {
		return false
	}
	n := s.at(last.Offset)
	for i := len(items) - 1; i >= 0; i-- {
		if n == nil || n.e.offset != items[i].Offset || n.e.count != items[i].Count || n.e.value != items[i].Value {
			return false
		}
		n = n.prev
	}
	return true
}

func step(st, in, out interface{}) (bool, interface{}) {
	s := st.(logState)
	i := in.(input)
	o := out.(output)
	switch i.kind {
	case opAppend:
		if o.unknown {
			// It took effect at a free offset, or (past them all) not at all: an operation
			// without a return may be linearized last, where it changes nothing observed.
			// Anywhere else an unread entry of it would contradict the reads.
			//
			// Such appends are linearized in the order of their calls, those that wrote the
			// free offsets first: any linearization can swap which of them did what (their
			// values are unread and their returns unbounded, so an earlier call fits wherever
			// a later one did), and fixing the order keeps the search from trying every
			// permutation of them.
			if i.free == nil {
				return true, s.appendEntry(entry{offset: s.end, count: i.count, value: i.value})
			}
			if i.rank >= 0 && i.rank != s.filled {
				return false, s
			}
			switch {
			case i.free.holds(s.end, i.count):
				next := s.appendEntry(entry{offset: s.end, count: i.count, value: unreadValue})
				next.filled++
				return true, next
			case i.free.past(s.end):
				return true, logState{tail: s.tail, end: s.end, bound: s.bound, filled: s.filled + 1}
			}
			return false, s
		}
		if o.offset != s.end {
			return false, s
		}
		return true, s.appendEntry(entry{offset: o.offset, count: i.count, value: i.value})
	case opRead:
		if o.marker > s.bound {
			return false, s
		}
		return s.matches(max64(i.from, o.marker), o.entries, o.toEnd), s
	case opTail:
		return o.next == s.end && o.first <= s.bound && o.first <= o.next, s
	case opTrim:
		limit := max64(s.bound, min64(i.through+1, s.end))
		if o.unknown {
			return true, logState{tail: s.tail, end: s.end, bound: limit, filled: s.filled}
		}
		if o.marker > limit {
			return false, s
		}
		return true, logState{tail: s.tail, end: s.end, bound: max64(s.bound, o.marker), filled: s.filled}
	}
	return false, s
}

func describeOperation(in, out interface{}) string {
	i := in.(input)
	o := out.(output)
	switch i.kind {
	case opAppend:
		if o.unknown {
			return fmt.Sprintf("append(%s) -> unknown", i.value)
		}
		return fmt.Sprintf("append(%s) -> %d", i.value, o.offset)
	case opRead:
		var parts []string
		for _, e := range o.entries {
			parts = append(parts, fmt.Sprintf("%d:%s", e.Offset, e.Value))
		}
		if len(parts) > 6 {
			parts = append(parts[:3], append([]string{fmt.Sprintf("… %d more …", len(parts)-6)}, parts[len(parts)-3:]...)...)
		}
		end := ""
		if o.toEnd {
			end = " (to the end)"
		}
		return fmt.Sprintf("read(%d) B=%d -> [%s]%s", i.from, o.marker, strings.Join(parts, " "), end)
	case opTail:
		return fmt.Sprintf("tail() -> first %d, next %d", o.first, o.next)
	case opTrim:
		if o.unknown {
			return fmt.Sprintf("trim(%d) -> unknown", i.through)
		}
		return fmt.Sprintf("trim(%d) -> B=%d", i.through, o.marker)
	}
	return "?"
}

func describeState(st interface{}) string {
	s := st.(logState)
	var parts []string
	n := s.tail
	for k := 0; n != nil && k < 5; k++ {
		parts = append([]string{fmt.Sprintf("%d:%s", n.e.offset, n.e.value)}, parts...)
		n = n.prev
	}
	if n != nil {
		parts = append([]string{"…"}, parts...)
	}
	return fmt.Sprintf("end %d, B ≤ %d, [%s]", s.end, s.bound, strings.Join(parts, " "))
}

// logModel is the model of one log; histories are split by log before checking.
var logModel = porcupine.Model{
	Init: func() interface{} { return logState{} },
	Step: step,
	Equal: func(a, b interface{}) bool {
		x, y := a.(logState), b.(logState)
		return x.end == y.end && x.bound == y.bound && x.filled == y.filled && sameList(x.tail, y.tail)
	},
	Hash: func(st interface{}) uint64 {
		s := st.(logState)
		var h uint64
		if s.tail != nil {
			h = s.tail.hash
		}
		return h ^ (uint64(s.bound) * 0x9E3779B97F4A7C15) ^ uint64(s.end) ^ (uint64(s.filled) << 40)
	},
	DescribeOperation: describeOperation,
	DescribeState:     describeState,
}
