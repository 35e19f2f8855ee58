// Package lockbench measures distributed locks from the outside: Lock and
// Unlock latency, throughput under contention, hand-over latency, fairness,
// and FIFO order. It is the measuring code shared by the `fairlock bench`
// command and the comparison in the repository's benchmarks/ module, so
// both report the same quantities computed the same way.
//
// A lock under test is a Locker: one contender's handle on one lock.
// MutexLocker adapts a fairlock *lock.Mutex; any other lock library fits
// in a few lines (see LockerFuncs).
//
// Definitions used throughout:
//
//   - wait: from the Lock call to its return;
//   - hand-over: between two consecutive acquisitions by different
//     contenders, from the previous holder's Unlock returning to the next
//     holder's Lock returning;
//   - overtake: an acquisition by a contender that started waiting later
//     than another contender that was still waiting when it acquired
//     (client clocks: two calls microseconds apart may reach the server in
//     either order, so a FIFO lock can show a few);
//   - FIFO violation (fairlock only): an acquisition that a server-side
//     snapshot of the queue predicted for another owner (CheckSnapshots);
//   - fairness: Jain's index over the contenders' acquisition counts, 1
//     when all acquired equally often, 1/n when one did all.
//
// Every run is bounded in count or time (or both) and by its context.
//
// Latencies of uncontended and many-locks runs are kept in a Histogram
// (an HDR histogram: constant memory, percentiles within 0.1%), not
// sample by sample, so long runs cost no more memory than short ones. A
// contended run keeps every Acquisition: its FIFO, hand-over and overtake
// checks need each one's contender, token and times. A Progress given to a
// run with WithProgress counts its operations as they complete, for live
// reports on long runs.
package lockbench
