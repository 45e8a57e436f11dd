package gradtape

// Resuming after a transport failure (docs/RELIABILITY.md "Resuming clients"; the
// contract is "Exactly-once application" and "Which statuses are the
// server's" at the top of proto/gradtape/v1/tape_service.proto).
//
// The rules a client follows, and what this one does:
//
//   - Seqs strictly increase within a session, and the server applies a seq
//     once: a command sent again with its seq is a duplicate, skipped and
//     answered from the server's kept result (CommandResult.Duplicate), or
//     with a mark (Duplicate and no kind) when it had none to keep.
//   - A client keeps every batch it sent until a reply acknowledges it (a
//     reply acknowledges its batch and every earlier one) and sends ack_seq,
//     the last seq whose results it holds. This client waits for the reply
//     to every batch (Sync), so the batch in flight is the only one kept.
//   - A Stream (or Run) that ends with Unavailable, Internal or Unknown and
//     WITHOUT the trailer gradtape-server-status failed in transport (a
//     dropped connection, a proxy's RST_STREAM or 502). The client then
//     reconnects: KeepAlive probes (also answering last_applied_seq) with
//     exponential backoff and jitter for at most the reconnect timeout
//     (WithReconnect; 30 s by default, 0 turns it off), a new Stream on the
//     same session (same id, token and API key), and the unacknowledged
//     batch sent again, same seqs.
//   - A duplicate fetch whose result the server no longer kept gets Aborted
//     "... no longer kept: fetch again" (or "... no longer known"), and one
//     whose kept result no longer fits the resent batch's reply gets
//     ResourceExhausted: the fetch is sent again with a new seq (a fetch is
//     a read).
//   - A probe the proxy answers with its replica-unreachable verdict
//     (ProxyVerdictTrailer) is retried too, but once probes in a row have
//     carried it for ReplicaUnreachableGrace the session is lost with the
//     Unavailable "... unreachable ..." error below, whatever remains of
//     the reconnect timeout (a failure without the verdict starts the
//     count again and keeps the whole timeout).
//   - Anything else is final and never retried: a status with the trailer
//     (NotFound: the server no longer has the session; Unavailable "server
//     draining": restore the drain checkpoint in a new session), or any
//     other code. The session is then lost: Sync and every later call
//     return the same *SessionLostError (Unavailable "session <id>: server
//     <addr> unreachable for <T> s (<N> reconnect attempts): ..." or NotFound
//     "session <id>: the server no longer has this session ...").
//   - CreateSession that fails in transport is retried with a new random
//     session id within the same bound (a proxy routes by the id).

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "gradtape/client/go/gen/gradtapev1"
)

// ServerStatusTrailer is the trailing metadata on every non-OK status the
// gradtape server itself sends.
const ServerStatusTrailer = "gradtape-server-status"

// The proxy's verdict on a session's replica (deploy/k8s/nginx/proxy.conf;
// docs/RELIABILITY.md "A replica lost behind the proxy"): a status the proxy answers
// because it cannot reach the replica the session id routes to carries
// ProxyVerdictTrailer: ReplicaUnreachableVerdict. It is still a transport
// failure.
const (
	ProxyVerdictTrailer       = "gradtape-proxy-verdict"
	ReplicaUnreachableVerdict = "replica-unreachable"
	// ReplicaUnreachableGrace is how long reconnect probes in a row must
	// carry the verdict before the session is lost. Waiting longer does not
	// help: a replica that restarts comes back without the session
	// (NotFound), and one the proxy cannot reach for this long is taken as
	// gone.
	ReplicaUnreachableGrace = 2 * time.Second
)

// IsReplicaUnreachable reports whether trailer (a failed call's trailing
// metadata) carries the proxy's replica-unreachable verdict.
func IsReplicaUnreachable(trailer metadata.MD) bool {
	for _, v := range trailer.Get(ProxyVerdictTrailer) {
		if v == ReplicaUnreachableVerdict {
			return true
		}
	}
	return false
}

// replicaVerdicts counts the reconnect probes in a row that carried the
// proxy's replica-unreachable verdict.
type replicaVerdicts struct {
	first time.Time
	count int
}

// record notes a probe that failed in transport at now, with the verdict
// or without (which starts the count again); true once the verdict is
// final: at least two probes in a row carried it, the first at least
// ReplicaUnreachableGrace before the last.
func (v *replicaVerdicts) record(verdict bool, now time.Time) bool {
	if !verdict {
		*v = replicaVerdicts{}
		return false
	}
	if v.count == 0 {
		v.first = now
	}
	v.count++
	return v.count >= 2 && now.Sub(v.first) >= ReplicaUnreachableGrace
}

// capSleep shortens sleep so that the next probe comes by the grace's end
// (at least 1 ms from now) while verdicts are being counted.
func (v *replicaVerdicts) capSleep(sleep time.Duration, now time.Time) time.Duration {
	if v.count == 0 {
		return sleep
	}
	return min(sleep, max(v.first.Add(ReplicaUnreachableGrace).Sub(now), time.Millisecond))
}

// IsTransportFailure reports whether err, the status of a call whose
// trailing metadata is trailer, is a transport failure the client resumes
// from: Unavailable, Internal or Unknown without ServerStatusTrailer.
func IsTransportFailure(err error, trailer metadata.MD) bool {
	if err == nil || len(trailer.Get(ServerStatusTrailer)) > 0 {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// SessionLostError is the one error of a session that cannot be resumed;
// status.Code(err) gives Code.
type SessionLostError struct {
	Code      codes.Code
	SessionID string
	Message   string
}

func (e *SessionLostError) Error() string {
	return fmt.Sprintf("%s: session %s: %s", e.Code, e.SessionID, e.Message)
}

// GRPCStatus makes status.Code and status.FromError see Code.
func (e *SessionLostError) GRPCStatus() *status.Status {
	return status.New(e.Code, e.Error())
}

// ResumeCounters count what resuming did (Session.ResumeCounters).
type ResumeCounters struct {
	TransportFailures int64 // streams that ended in transport
	ReconnectAttempts int64 // KeepAlive probes
	Resumes           int64 // new streams with the batch resent
	CommandsResent    int64
	DuplicateResults  int64 // results the server marked duplicate
	Refetches         int64 // fetches sent again with a new seq
}

type resumeConfig struct {
	timeout, initialBackoff, maxBackoff time.Duration
}

// WithReconnect sets how the session resumes after a transport failure:
// for at most timeout since the failure (0: never), backing off from
// initial to max between attempts.
func WithReconnect(timeout, initial, max time.Duration) Option {
	return func(c *connectConfig) { c.resume = resumeConfig{timeout, initial, max} }
}

func defaultResume() resumeConfig {
	return resumeConfig{30 * time.Second, 50 * time.Millisecond, 2 * time.Second}
}

// resumeState is the part of a Session that resuming needs.
type resumeState struct {
	address  string
	cfg      resumeConfig
	ackedSeq int64
	lost     error
	stale    map[int64]bool // reads whose result was no longer kept
	counters ResumeCounters
}

// ResumeCounters returns what resuming did so far.
func (s *Session) ResumeCounters() ResumeCounters { return s.resume.counters }

func lostError(code codes.Code, id, format string, args ...any) error {
	return &SessionLostError{Code: code, SessionID: id, Message: fmt.Sprintf(format, args...)}
}

// finalError words a final status (with the server's trailer, or not a
// transport code) for the caller.
func (s *Session) finalError(err error) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.NotFound:
		return lostError(codes.NotFound, s.ID, "the server no longer has this session "+
			"(it restarted, drained, or the session's lease ran out): %s", st.Message())
	case codes.Unavailable:
		return lostError(codes.Unavailable, s.ID, "server %s is draining and ended the "+
			"session's stream; restore the drain checkpoint (--checkpoint_on_drain) in a "+
			"new session: %s", s.resume.address, st.Message())
	}
	return lostError(st.Code(), s.ID, "%s", st.Message())
}

// exchange sends batch and returns its reply, resuming after transport
// failures (the batch is sent again, same seqs, on a new stream).
func (s *Session) exchange(batch *pb.CommandBatch) (*pb.BatchReply, error) {
	if s.resume.lost != nil {
		return nil, s.resume.lost
	}
	batch.AckSeq = s.resume.ackedSeq
	for {
		reply, err := s.sendAndReceive(batch)
		if err == nil {
			if n := len(batch.Commands); n > 0 {
				s.resume.ackedSeq = batch.Commands[n-1].Seq
			}
			return reply, nil
		}
		if !IsTransportFailure(err, s.stream.Trailer()) {
			s.resume.lost = s.finalError(err)
			return nil, s.resume.lost
		}
		s.resume.counters.TransportFailures++
		if s.resume.cfg.timeout <= 0 {
			s.resume.lost = lostError(codes.Unavailable, s.ID, "the connection to server %s "+
				"was lost and reconnecting is off: %s", s.resume.address, status.Convert(err).Message())
			return nil, s.resume.lost
		}
		if err := s.reconnect(err); err != nil {
			s.resume.lost = err
			return nil, err
		}
		s.resume.counters.Resumes++
		s.resume.counters.CommandsResent += int64(len(batch.Commands))
	}
}

func (s *Session) sendAndReceive(batch *pb.CommandBatch) (*pb.BatchReply, error) {
	if err := s.stream.Send(batch); err != nil {
		// The stream's status comes from Recv.
		if _, rerr := s.stream.Recv(); rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	return s.stream.Recv()
}

// reconnect probes the session with KeepAlive until it answers, then opens
// a new stream; the error is the session's loss.
func (s *Session) reconnect(cause error) error {
	start := time.Now()
	deadline := start.Add(s.resume.cfg.timeout)
	backoff := s.resume.cfg.initialBackoff
	last := cause
	var verdicts replicaVerdicts
	unreachable := func(attempts int) error {
		return lostError(codes.Unavailable, s.ID, "server %s unreachable for %.1f s "+
			"(%d reconnect attempts): %s", s.resume.address, time.Since(start).Seconds(),
			attempts, status.Convert(last).Message())
	}
	for attempts := 0; ; attempts++ {
		if attempts > 0 {
			sleep := time.Duration(float64(backoff) * (0.5 + 0.5*rand.Float64()))
			sleep = min(verdicts.capSleep(sleep, time.Now()), time.Until(deadline))
			time.Sleep(sleep)
			if backoff *= 2; backoff > s.resume.cfg.maxBackoff {
				backoff = s.resume.cfg.maxBackoff
			}
		}
		if !time.Now().Before(deadline) {
			return unreachable(attempts)
		}
		s.resume.counters.ReconnectAttempts++
		ctx, cancel := context.WithDeadline(s.ctx, minTime(deadline, time.Now().Add(10*time.Second)))
		var trailer metadata.MD
		_, err := s.client.KeepAlive(ctx, &pb.KeepAliveRequest{}, grpc.Trailer(&trailer))
		ownDeadline := errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			stream, serr := s.client.Stream(s.ctx)
			if serr == nil {
				s.stream = stream
				return nil
			}
			err = serr
		}
		if !IsTransportFailure(err, trailer) && !(ownDeadline && status.Code(err) == codes.DeadlineExceeded) {
			return s.finalError(err)
		}
		last = err
		if verdicts.record(IsReplicaUnreachable(trailer), time.Now()) {
			return unreachable(attempts + 1)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// staleRead reports whether duplicate answer r leaves nothing to store:
// the Aborted answer to a read (FetchTensor) whose result the server no
// longer kept, which it remembers for call to read again, or a mark (no
// kind: applied before, its result delivered or not kept; a read waiting
// on it is read again too).
func (s *Session) staleRead(batch *pb.CommandBatch, r *pb.CommandResult) bool {
	if !r.Duplicate {
		return false
	}
	s.resume.counters.DuplicateResults++
	mark := r.Kind == nil
	e := r.GetError()
	// Gone (Aborted), or too large for the resent batch's reply
	// (ResourceExhausted): read again with a new seq.
	if !mark && (e == nil || (codes.Code(e.Code) != codes.Aborted && codes.Code(e.Code) != codes.ResourceExhausted)) {
		return false
	}
	for _, c := range batch.Commands {
		if c.Seq == r.Seq && c.GetFetch() != nil {
			if s.resume.stale == nil {
				s.resume.stale = map[int64]bool{}
			}
			s.resume.stale[r.Seq] = true
			return true
		}
	}
	return mark
}

// createSession is CreateSession, retried in transport with a new random
// id within the reconnect timeout.
func createSession(ctx context.Context, client pb.TapeServiceClient, address string,
	cfg resumeConfig, newID func() (string, error)) (*pb.CreateSessionResponse, error) {
	start := time.Now()
	backoff := cfg.initialBackoff
	for attempt := 1; ; attempt++ {
		id, err := newID()
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "gradtape-session-id", id), 10*time.Second)
		var trailer metadata.MD
		resp, err := client.CreateSession(cctx, &pb.CreateSessionRequest{SessionId: id},
			grpc.WaitForReady(true), grpc.Trailer(&trailer))
		cancel()
		if err == nil {
			return resp, nil
		}
		if !IsTransportFailure(err, trailer) || time.Since(start)+backoff > cfg.timeout {
			return nil, fmt.Errorf("CreateSession at %s (attempt %d): %w", address, attempt, err)
		}
		time.Sleep(backoff)
		if backoff *= 2; backoff > cfg.maxBackoff {
			backoff = cfg.maxBackoff
		}
	}
}
