package execution

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/backoff"
)

// Notifier wakes requesters waiting for a slot of a task when a slot is returned or the task's
// overrides change. It listens on one connection of its own, opened on the first Subscribe with
// the pool's connection settings and its BeforeConnect and AfterConnect hooks (or with
// NotifierOptions.Listener), and opened anew after a failure. It is not taken from the pool:
// several clients may share a pool, and a listener holding a pooled connection each could
// exhaust it. Notifications are hints: waiters
// also poll, so a lost notification (a broken connection, a transaction-pooling PgBouncer)
// delays a waiter but never strands it.
//
// A notification wakes one local waiter, the longest waiting, not all of them: a waiter that gets
// a slot (or gives up) passes the wake-up on with Pass, so free slots are filled one after
// another without a herd of denied attempts queueing on the task's lock.
type Notifier struct {
	pool    *pgxpool.Pool
	opts    NotifierOptions
	onError func(err error, retryIn time.Duration) // the listener failed; nil: ignore
	probes  sync.WaitGroup                         // delivery checks in flight (probeDelivery)

	mu        sync.Mutex
	subs      map[int64][]chan struct{}  // per task, oldest first
	topics    map[string][]chan struct{} // other notifications (SubscribeTopic)
	tickets   map[<-chan struct{}]int64  // a subscriber's ticket in its task's queue (SetTicket)
	running   bool
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	ready     chan struct{}      // closed once LISTEN is in place (or gave up for now)
	drop      context.CancelFunc // ends the current LISTEN connection (Reconnect)
	probe     string             // payload of the delivery check (probeDelivery)
	probeSent bool               // the delivery check was started (under mu)
	arrived   chan struct{}      // closed when the delivery check's notification arrives
	onArrived func()             // closes arrived, once

	listening   atomic.Bool // LISTEN is in place
	undelivered atomic.Bool // the delivery check's notification never arrived
}

// NotifierOptions configure a Notifier; the zero value listens on a connection opened like the
// pool's.
type NotifierOptions struct {
	// OnError hears of every failure of the listener, with the delay before it tries again.
	OnError func(err error, retryIn time.Duration)
	// Listener, if not nil, configures the listening connection instead of the pool (whose hooks
	// then do not run): the server itself when the pool goes through a transaction-pooling
	// PgBouncer, which cannot carry a LISTEN.
	Listener *pgx.ConnConfig
	// Off: never listen. Subscribers are then woken only by this process (Pass), and poll.
	Off bool
	// OnUndelivered hears that a notification sent through the pool once the listener was in
	// place did not reach it within ProbeTimeout (default 5s): notifications are lost on the way
	// (the listener goes through a transaction pooler), so waiters of other processes are woken
	// only by polling.
	OnUndelivered func()
	ProbeTimeout  time.Duration
}

// NewNotifier returns a Notifier listening on a connection of pool. onError (if not nil) hears
// of every failure of the listener, with the delay before it tries again.
func NewNotifier(pool *pgxpool.Pool, onError func(err error, retryIn time.Duration)) *Notifier {
	return NewNotifierWith(pool, NotifierOptions{OnError: onError})
}

// NewNotifierWith returns a Notifier configured by opts; pool sends the delivery check's
// notification (and is the listener's connection settings unless opts.Listener).
func NewNotifierWith(pool *pgxpool.Pool, opts NotifierOptions) *Notifier {
	ctx, cancel := context.WithCancel(context.Background())
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 5 * time.Second
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	n := &Notifier{pool: pool, opts: opts, onError: opts.OnError, subs: map[int64][]chan struct{}{}, topics: map[string][]chan struct{}{},
		tickets: map[<-chan struct{}]int64{}, ctx: ctx, cancel: cancel, probe: "probe:" + hex.EncodeToString(b[:]), arrived: make(chan struct{})}
	n.onArrived = sync.OnceFunc(func() { close(n.arrived) })
	return n
}

// Subscribe returns a channel that receives a value (coalesced) whenever taskID may have a free
// slot, and a function that ends the subscription.
func (n *Notifier) Subscribe(taskID int64) (<-chan struct{}, func()) {
	return subscribe(n, n.subs, taskID)
}

// subscribe adds a subscriber of key to subs (n.subs or n.topics) and starts the listener.
func subscribe[K comparable](n *Notifier, subs map[K][]chan struct{}, key K) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	subs[key] = append(subs[key], ch)
	n.startLocked()
	ready := n.ready
	n.mu.Unlock()
	// Wait briefly for LISTEN so a notification sent right after this call is not missed;
	// subscribers poll anyway, so never long.
	if ready != nil {
		select {
		case <-ready:
		case <-time.After(2 * time.Second):
		}
	}
	return ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.tickets, ch)
		rest := slices.DeleteFunc(slices.Clone(subs[key]), func(c chan struct{}) bool { return c == ch })
		if len(rest) == 0 {
			delete(subs, key)
		} else {
			subs[key] = rest
		}
	}
}

// Topics other than freed slots, on the same channel.

// SubmittedTopic is notified when a submission of the task starts waiting (it was submitted, or
// an attempt ended and it waits for another).
func SubmittedTopic(taskID int64) string { return "s" + strconv.FormatInt(taskID, 10) }

// CancelTopic is notified when an operator cancels the submission.
func CancelTopic(submissionID int64) string { return "c" + strconv.FormatInt(submissionID, 10) }

// SubscribeTopic returns a channel that receives a value (coalesced) whenever topic is
// notified, and a function that ends the subscription. Like slot notifications, these are hints:
// subscribers poll too.
func (n *Notifier) SubscribeTopic(topic string) (<-chan struct{}, func()) {
	return subscribe(n, n.topics, topic)
}

// startLocked starts the listener unless it runs (or the Notifier is closed). Called with mu held.
func (n *Notifier) startLocked() {
	if !n.running && n.ctx.Err() == nil && !n.opts.Off {
		n.running = true
		n.done = make(chan struct{})
		n.ready = make(chan struct{})
		go n.run()
	}
}

func (n *Notifier) wakeTopic(topic string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.topics[topic] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// PassOffered wakes this process's waiters of taskID holding the offered tickets (and those
// without a ticket yet); with none offered, the next waiter, as Pass.
func (n *Notifier) PassOffered(taskID int64, offered []int64) {
	if len(offered) == 0 {
		n.wake(taskID)
		return
	}
	n.wakeOffered(taskID, offered)
}

// Pass wakes the next waiter of taskID: a waiter calls it when it got a slot or stopped waiting,
// since more slots may be free.
func (n *Notifier) Pass(taskID int64) { n.wake(taskID) }

// Listening reports whether notifications reach this process now: LISTEN is in place, and the
// delivery check did not find them lost. (One that breaks wakes every waiter when it does.)
func (n *Notifier) Listening() bool { return n.listening.Load() && !n.undelivered.Load() }

// Reconnect closes the listening connection, which is opened anew (after a short delay, waking
// every waiter): its server was found read-only, so writes, and their notifications, now go to
// another one.
func (n *Notifier) Reconnect() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.drop != nil {
		n.drop()
	}
}

// Close stops listening and waits for the listener to end.
func (n *Notifier) Close() {
	n.cancel()
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done != nil {
		<-done
	}
	n.probes.Wait()
}

func (n *Notifier) run() {
	defer close(n.done)
	readyOnce := sync.OnceFunc(func() { close(n.ready) })
	defer readyOnce()
	for attempt := 0; n.ctx.Err() == nil; attempt++ {
		listened, err := n.listen(readyOnce)
		if listened {
			attempt = 0
		}
		readyOnce() // do not keep subscribers waiting while the database is away
		n.wakeAll() // anything may have been missed while disconnected
		if n.ctx.Err() != nil {
			return
		}
		wait := backoff.Delay(attempt, 100*time.Millisecond, 5*time.Second)
		if n.onError != nil {
			n.onError(err, wait)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// listen holds one LISTEN connection until it fails; it reports whether it got as far as LISTEN,
// and why it stopped.
func (n *Notifier) listen(ready func()) (listened bool, err error) {
	cctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	var conn *pgx.Conn
	if n.opts.Listener != nil {
		conn, err = pgx.ConnectConfig(cctx, n.opts.Listener.Copy())
	} else {
		conn, err = connectLike(cctx, n.pool)
	}
	cancel()
	if err != nil {
		return false, fmt.Errorf("connect to LISTEN: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	lctx, drop := context.WithCancel(n.ctx)
	defer drop()
	n.mu.Lock()
	n.drop = drop
	n.mu.Unlock()
	if _, err := conn.Exec(lctx, "LISTEN "+notifyChannel); err != nil {
		return false, fmt.Errorf("LISTEN: %w", err)
	}
	ready()
	n.listening.Store(true)
	defer n.listening.Store(false)
	n.startProbe()
	for {
		note, err := conn.WaitForNotification(lctx)
		if err != nil {
			return true, fmt.Errorf("wait for notifications: %w", err)
		}
		if note.Payload == n.probe {
			n.onArrived()
			continue
		}
		if id, offered, ok := parseSlotPayload(note.Payload); ok {
			n.wakeOffered(id, offered)
		} else {
			n.wakeTopic(note.Payload)
		}
	}
}

// startProbe checks, on the first LISTEN only, that a notification sent through the pool
// reaches the listener. Behind a transaction-pooling PgBouncer the LISTEN lands on a server
// connection that goes back to the pool, and nothing arrives: a misconfiguration that cannot be
// seen before connecting.
func (n *Notifier) startProbe() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.probeSent || n.opts.OnUndelivered == nil || n.ctx.Err() != nil {
		return
	}
	n.probeSent = true
	n.probes.Add(1)
	go n.probeDelivery()
}

func (n *Notifier) probeDelivery() {
	defer n.probes.Done()
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.ProbeTimeout)
	_, err := n.pool.Exec(ctx, "SELECT pg_notify($1, $2)", notifyChannel, n.probe)
	cancel()
	if err != nil {
		return // the database is away: no conclusion
	}
	select {
	case <-n.arrived:
	case <-n.ctx.Done():
	case <-time.After(n.opts.ProbeTimeout):
		n.undelivered.Store(true)
		n.opts.OnUndelivered()
	}
}

// connectLike opens a connection as pool would, running its BeforeConnect and AfterConnect hooks
// (a hook may supply a rotating password, or set the session up).
func connectLike(ctx context.Context, pool *pgxpool.Pool) (*pgx.Conn, error) {
	pc := pool.Config()
	cfg := pc.ConnConfig.Copy()
	if pc.BeforeConnect != nil {
		if err := pc.BeforeConnect(ctx, cfg); err != nil {
			return nil, err
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if pc.AfterConnect != nil {
		if err := pc.AfterConnect(ctx, conn); err != nil {
			_ = conn.Close(ctx)
			return nil, err
		}
	}
	return conn, nil
}

// wake signals the longest-waiting subscriber of taskID that has no wake-up pending.
func (n *Notifier) wake(taskID int64) { n.wakeSubs(taskID) }

// SetTicket records the ticket the subscriber ch (Subscribe) holds in its task's queue: a freed
// slot's notification then wakes it only if the slot is offered to that ticket.
func (n *Notifier) SetTicket(ch <-chan struct{}, ticket int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tickets[ch] = ticket
}

// parseSlotPayload parses a freed slot's notification (notifyPayload): "12" or "12:40,41".
func parseSlotPayload(p string) (taskID int64, offered []int64, ok bool) {
	head, list, hasList := strings.Cut(p, ":")
	id, err := strconv.ParseInt(head, 10, 64)
	if err != nil {
		return 0, nil, false
	}
	if hasList {
		for _, f := range strings.Split(list, ",") {
			t, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return id, nil, true // unreadable: wake everyone
			}
			offered = append(offered, t)
		}
	}
	return id, offered, true
}

// wakeOffered wakes the waiters of the task the freed slot is offered to, and those that hold no
// ticket (yet); with no offers named, every waiter of the task.
func (n *Notifier) wakeOffered(taskID int64, offered []int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.subs[taskID] {
		if t := n.tickets[ch]; len(offered) > 0 && t != 0 && !slices.Contains(offered, t) {
			continue
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// wakeSubs wakes the first waiter of the task that is not awake yet.
func (n *Notifier) wakeSubs(taskID int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.subs[taskID] {
		select {
		case ch <- struct{}{}:
			return
		default:
		}
	}
}

func (n *Notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, subs := range n.subs {
		for _, ch := range subs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	for _, subs := range n.topics {
		for _, ch := range subs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}
