package node

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node/api"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Timers of the CA keeper.
const (
	// caTick is how often the keeper looks again without being woken
	// (retiring roots, retries).
	caTick = time.Second
	// maxFetchBackoff bounds the wait between attempts to fetch a missing
	// CA key from the other voters.
	maxFetchBackoff = 30 * time.Second
	// pendingLostAfter is how long a rotation's new root may go without any
	// live holder before the leader makes another (its maker died before
	// handing the key to anyone).
	pendingLostAfter = 30 * time.Second
)

// caKeeper is this node's part in the cluster CA (identity/DESIGN.md):
//
//   - as a voter it holds the keys of the active and pending roots,
//     fetched from another voter over peer RPC when it lacks one, and signs
//     with the active one; as a non-voter it holds none (a demoted voter
//     deletes its copy once another live voter holds each key);
//   - it keeps this node's credentials trusting the replicated trust bundle
//     and asks for a renewal when a rotation activates a new root;
//   - it tells the others through gossip labels which keys it holds and
//     which root issued its certificate;
//   - on the leader, it carries rotations forward: makes the new root,
//     activates it once every live voter holds its key, and drops the old
//     root after the overlap once every live node renewed.
//
// It implements api.Issuer.
type caKeeper struct {
	n        *Node
	kr       *identity.Keyring
	log      *slog.Logger
	renewNow chan struct{} // wakes the renewal loop (capacity 1)

	certs sync.Map // DER string → parsed *x509.Certificate

	mu         sync.Mutex // the fields below; held by the keeper loop only
	nextFetch  time.Time
	backoff    time.Duration
	lostSince  map[string]time.Time // leader: pending root seen without a live holder since
	lagLogged  time.Time
	lastVoter  bool
	lastLabels string
}

var _ api.Issuer = (*caKeeper)(nil)

// openKeeper opens the keyring in the data dir's CA directory.
func (n *Node) openKeeper() (*caKeeper, error) {
	kr, err := identity.OpenKeyring(n.layout.CADir(), identity.WithTokenLedger(tokenLedger{n}), identity.WithLogger(n.log))
	if err != nil {
		return nil, fmt.Errorf("open the cluster CA keys: %w", err)
	}
	return &caKeeper{n: n, kr: kr, log: n.log.With("component", "ca"), renewNow: make(chan struct{}, 1),
		lostSince: map[string]time.Time{}, lastVoter: true}, nil
}

func (k *caKeeper) parse(der []byte) *x509.Certificate {
	if c, ok := k.certs.Load(string(der)); ok {
		return c.(*x509.Certificate)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		k.log.Error("trust bundle holds a certificate that does not parse", "err", err)
		return nil
	}
	k.certs.Store(string(der), c)
	return c
}

func (k *caKeeper) trust() consensus.TrustBundle {
	st := k.n.stateOrNil()
	if st == nil {
		return consensus.TrustBundle{}
	}
	return st.Trust()
}

// activeCA is the CA of the active root if this node holds its key. Before
// the bundle is recorded, the one CA of the node that made the cluster.
func (k *caKeeper) activeCA(b consensus.TrustBundle) *identity.CA {
	if a, ok := b.Active(); ok {
		return k.kr.Get(a.Fingerprint)
	}
	if fps := k.kr.Fingerprints(); len(fps) == 1 && len(b.Roots) == 0 {
		return k.kr.Get(fps[0])
	}
	return nil
}

// CanSign reports whether this node holds the active root's key.
func (k *caKeeper) CanSign() bool { return k.activeCA(k.trust()) != nil }

// Sign issues a certificate under the active root; during a rotation the
// cross-certificate follows the leaf, so peers still trusting only the
// old root accept it.
func (k *caKeeper) Sign(ctx context.Context, csrDER []byte, p identity.Principal, ttl time.Duration) ([]*x509.Certificate, error) {
	b := k.trust()
	ca := k.activeCA(b)
	if ca == nil {
		return nil, identity.ErrNoSigner
	}
	chain, err := ca.Sign(ctx, csrDER, p, ttl)
	if err != nil {
		return nil, err
	}
	if x := k.crossFor(ca.Fingerprint(), b); x != nil {
		chain = append(chain, x)
	}
	return chain, nil
}

// crossFor is root fp's cross-certificate, while the root that signed it is
// still trusted (afterwards nobody needs the bridge).
func (k *caKeeper) crossFor(fp string, b consensus.TrustBundle) *x509.Certificate {
	r, ok := b.Root(fp)
	if !ok || len(r.CrossDER) == 0 {
		return nil
	}
	if _, ok := b.Root(r.CrossFrom); !ok {
		return nil
	}
	return k.parse(r.CrossDER)
}

// bundleRoots parses the bundle's roots: active, pending, then retiring.
func (k *caKeeper) bundleRoots(b consensus.TrustBundle) []*x509.Certificate {
	var out []*x509.Certificate
	for _, st := range []consensus.RootState{consensus.RootActive, consensus.RootPending, consensus.RootRetiring} {
		for _, r := range b.Roots {
			if r.State == st {
				if c := k.parse(r.DER); c != nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// Roots is the trust bundle, active root first (before the bundle is
// recorded: the roots this node's credential trusts).
func (k *caKeeper) Roots() []*x509.Certificate {
	if roots := k.bundleRoots(k.trust()); len(roots) > 0 {
		return roots
	}
	return k.n.cred.Current().RootCerts
}

// Fingerprint names the active root.
func (k *caKeeper) Fingerprint() string {
	b := k.trust()
	if a, ok := b.Active(); ok {
		return a.Fingerprint
	}
	if ca := k.activeCA(b); ca != nil {
		return ca.Fingerprint()
	}
	return fingerprint(k.n.cred.Current())
}

// wanted are the roots whose keys voters hold: the active and pending ones.
func wanted(b consensus.TrustBundle) []string {
	var out []string
	for _, r := range b.Roots {
		if r.State == consensus.RootActive || r.State == consensus.RootPending {
			out = append(out, r.Fingerprint)
		}
	}
	return out
}

// handOff is the key material this node gives a voter that asks.
func (k *caKeeper) handOff() []cluster.CAKey {
	b := k.trust()
	want := wanted(b)
	var out []cluster.CAKey
	for _, fp := range k.kr.Fingerprints() {
		if len(b.Roots) > 0 && !slices.Contains(want, fp) {
			continue
		}
		root, key, err := k.kr.Export(fp)
		if err != nil {
			k.log.Warn("cannot hand over a CA key", "root", prefix(fp), "err", err)
			continue
		}
		out = append(out, cluster.CAKey{RootDER: root, KeyDER: key})
	}
	return out
}

func prefix(fp string) string {
	if len(fp) > api.FingerprintPrefix {
		return fp[:api.FingerprintPrefix]
	}
	return fp
}

// labels are the gossip labels saying which CA keys this node holds and
// which root issued its certificate.
func (k *caKeeper) labels(b consensus.TrustBundle) map[string]string {
	want := wanted(b)
	var held []string
	for _, fp := range k.kr.Fingerprints() {
		if len(b.Roots) == 0 || slices.Contains(want, fp) {
			held = append(held, prefix(fp))
		}
	}
	out := map[string]string{}
	if len(held) > 0 {
		out[api.LabelCAKeys] = strings.Join(held, ",")
	}
	roots := k.bundleRoots(b)
	cur := k.n.cred.Current()
	if len(roots) == 0 {
		roots = cur.RootCerts
	}
	if r := identity.IssuingRoot(cur.Leaf, roots); r != nil {
		out[api.LabelCertRoot] = prefix(identity.Fingerprint(r.Raw))
	}
	if cur.Leaf != nil {
		out[api.LabelCertTimes] = api.CertTimes(cur.Leaf.NotAfter, identity.RenewAt(cur.Leaf))
	}
	return out
}

// due reports whether c must be renewed: two thirds into its lifetime,
// issued by a root other than the active one (a rotation activated), or
// missing from a certificate ledger restarted over certificates it lacks
// (a restore, a recovery, an upgrade): until c is renewed into the ledger,
// a certificate forged for this principal would be taken for it.
func (k *caKeeper) due(c *identity.Credential, b consensus.TrustBundle) bool {
	if time.Now().After(identity.RenewAt(c.Leaf)) {
		return true
	}
	if k.unrecorded(c) {
		return true
	}
	a, ok := b.Active()
	if !ok {
		return false
	}
	root := k.parse(a.DER)
	return root != nil && c.Leaf.CheckSignatureFrom(root) != nil
}

// unrecorded reports whether c is grandfathered by an incomplete ledger
// rather than recorded in it.
func (k *caKeeper) unrecorded(c *identity.Credential) bool {
	st := k.n.stateOrNil()
	if st == nil {
		return false
	}
	if _, complete, started := st.CertLedgerStarted(); !started || complete {
		return false
	}
	if cl := k.n.clusterRef.Load(); cl == nil || !cl.SeenSupport(cluster.FeatureCertLedger) {
		return false
	}
	v, _ := st.CertStatus(c.Leaf, string(c.Principal.Kind), c.Principal.ID)
	return v == consensus.CertUnchecked
}

// retrust returns c trusting the bundle's roots, and presenting the
// cross-certificate of its issuing root while that is needed; nil if c
// already does, or if no root of the bundle issued it (it must be renewed,
// or paired again).
func (k *caKeeper) retrust(c *identity.Credential, b consensus.TrustBundle) *identity.Credential {
	roots := k.bundleRoots(b)
	issuer := identity.IssuingRoot(c.Leaf, roots)
	if issuer == nil {
		return nil
	}
	var chain []*x509.Certificate
	if x := k.crossFor(identity.Fingerprint(issuer.Raw), b); x != nil {
		chain = append(chain, x)
	}
	if sameCerts(chain, c.Chain) && sameCerts(roots, c.RootCerts) {
		return nil
	}
	fresh := *c
	fresh.Chain, fresh.RootCerts, fresh.Roots = chain, roots, pool(roots)
	return &fresh
}

func sameCerts(a, b []*x509.Certificate) bool {
	return slices.EqualFunc(a, b, func(x, y *x509.Certificate) bool { return bytes.Equal(x.Raw, y.Raw) })
}

func pool(certs []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// run is the keeper's loop: one pass on every trust-bundle or membership
// change, and every caTick.
func (k *caKeeper) run(ctx context.Context) {
	st := k.n.store.State()
	changes := k.n.cluster.Changes()
	tick := time.NewTicker(caTick)
	defer tick.Stop()
	for {
		trust := st.Watch(consensus.TopicTrust)
		k.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-trust:
		case <-changes:
		case <-tick.C:
		}
	}
}

// step does one pass of everything the keeper keeps true.
func (k *caKeeper) step(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.trust()
	if len(b.Roots) == 0 {
		k.initTrust(ctx)
		k.publish(ctx, b)
		return
	}
	k.syncCredentials(b)
	k.custody(ctx, b)
	k.publish(ctx, k.trust())
	if k.n.store.IsLeader() {
		k.lead(ctx, k.trust())
	}
}

// initTrust records this node's root as the cluster's first, if it holds
// exactly one CA key and nothing is recorded yet (the node that created
// the cluster, at its first start).
func (k *caKeeper) initTrust(ctx context.Context) {
	fps := k.kr.Fingerprints()
	if len(fps) != 1 {
		return
	}
	root, _, err := k.kr.Export(fps[0])
	if err != nil {
		return
	}
	k.propose(ctx, &raftpb.CATrust{Op: &raftpb.CATrust_Init{Init: &raftpb.CAInitRoot{Der: root}}}, "record the cluster's CA root")
}

func (k *caKeeper) propose(ctx context.Context, t *raftpb.CATrust, what string) bool {
	t.AtMs, t.By = time.Now().UnixMilli(), "node:"+k.n.state.NodeID
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := k.n.apply(cctx, &raftpb.Command{Cmd: &raftpb.Command_CaTrust{CaTrust: t}}); err != nil {
		if !errors.Is(err, consensus.ErrConflict) {
			k.log.Warn("could not "+what, "err", err)
		}
		return false
	}
	return true
}

// syncCredentials makes this node's credentials (and the local operator's)
// trust the bundle, and wakes the renewal loop when one is due.
func (k *caKeeper) syncCredentials(b consensus.TrustBundle) {
	n := k.n
	n.credMu.Lock()
	defer n.credMu.Unlock()
	cur := n.cred.Current()
	if fresh := k.retrust(cur, b); fresh != nil {
		if err := identity.SaveCredential(n.layout.NodeCredDir(), fresh); err != nil {
			k.log.Error("cannot save the node credential with the new trust bundle", "err", err)
		} else if err := n.cred.Swap(fresh); err == nil {
			cur = fresh
			k.log.Info("node credential trusts the cluster's trust bundle", "roots", len(fresh.RootCerts))
		}
	}
	due := k.due(cur, b)
	if op, err := identity.LoadCredential(n.layout.OperatorDir()); err == nil {
		if fresh := k.retrust(op, b); fresh != nil {
			if err := identity.SaveCredential(n.layout.OperatorDir(), fresh); err != nil {
				k.log.Error("cannot save the operator credential with the new trust bundle", "err", err)
			}
		}
		due = due || k.due(op, b)
	}
	if due {
		select {
		case k.renewNow <- struct{}{}:
		default:
		}
	}
}

// custody holds the keys a voter must hold and nothing else: a voter
// fetches the keys of the active and pending roots it lacks; every node
// deletes keys of roots no longer in use; a node that is not a voter
// deletes its copies once another live voter holds each of them.
func (k *caKeeper) custody(ctx context.Context, b consensus.TrustBundle) {
	want := wanted(b)
	for _, fp := range k.kr.Fingerprints() {
		if !slices.Contains(want, fp) {
			if err := k.kr.Remove(fp); err != nil {
				k.log.Error("cannot delete the key of a retired CA root", "root", prefix(fp), "err", err)
			} else {
				k.log.Info("deleted the key of a CA root no longer in use", "root", prefix(fp))
			}
		}
	}
	voter := k.n.cluster.Voter()
	if voter != k.lastVoter {
		k.lastVoter = voter
		k.nextFetch, k.backoff = time.Time{}, 0
	}
	held := k.kr.Fingerprints()
	if voter {
		var missing []string
		for _, fp := range want {
			if !slices.Contains(held, fp) {
				missing = append(missing, fp)
			}
		}
		if len(missing) > 0 && !time.Now().Before(k.nextFetch) {
			k.fetch(ctx, missing)
		}
		return
	}
	if len(held) == 0 {
		return
	}
	others := k.holders(true)
	for _, fp := range held {
		if len(others[prefix(fp)]) == 0 {
			return // the last copy: keep it until a voter has fetched it
		}
	}
	for _, fp := range held {
		if err := k.kr.Remove(fp); err != nil {
			k.log.Error("cannot delete this node's copy of the CA key", "root", prefix(fp), "err", err)
			return
		}
	}
	k.log.Info("not a voter: deleted this node's copy of the cluster CA key (other voters hold it)")
}

// holders maps fingerprint prefixes to the other live nodes (voters only,
// if votersOnly) that say in gossip they hold that key.
func (k *caKeeper) holders(votersOnly bool) map[string][]string {
	out := map[string][]string{}
	for _, m := range k.n.cluster.Members() {
		if m.ID == k.n.state.NodeID || m.State != cluster.StateAlive || (votersOnly && !m.Voter) {
			continue
		}
		for _, p := range strings.Split(m.Labels[api.LabelCAKeys], ",") {
			if p != "" {
				out[p] = append(out[p], m.ID)
			}
		}
	}
	return out
}

// fetch asks the other voters for the missing keys.
func (k *caKeeper) fetch(ctx context.Context, missing []string) {
	var prefer []string
	hs := k.holders(false)
	for _, fp := range missing {
		prefer = append(prefer, hs[prefix(fp)]...)
	}
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	keys, err := k.n.cluster.FetchCAKeys(fctx, prefer, func(keys []cluster.CAKey) bool {
		for _, key := range keys {
			if slices.Contains(missing, identity.Fingerprint(key.RootDER)) {
				return true
			}
		}
		return false
	})
	if err != nil {
		k.backoff = min(max(2*k.backoff, time.Second), maxFetchBackoff)
		k.nextFetch = time.Now().Add(k.backoff)
		level := slog.LevelWarn
		if errors.Is(err, cluster.ErrNotVoter) || errors.Is(err, context.Canceled) {
			level = slog.LevelDebug // our promotion has not reached them yet
		}
		k.log.Log(ctx, level, "a voter without the CA key could not fetch it yet; retrying", "err", err, "in", k.backoff)
		return
	}
	k.nextFetch, k.backoff = time.Time{}, 0
	for _, key := range keys {
		fp := identity.Fingerprint(key.RootDER)
		if !slices.Contains(missing, fp) {
			continue
		}
		if _, err := k.kr.Import(key.RootDER, key.KeyDER); err != nil {
			k.log.Error("received a CA key that does not import", "root", prefix(fp), "err", err)
			continue
		}
		k.log.Info("voter: received the cluster CA key from another voter", "root", prefix(fp))
	}
}

// publish gossips this node's CA labels when they changed.
func (k *caKeeper) publish(ctx context.Context, b consensus.TrustBundle) {
	l := k.labels(b)
	enc := l[api.LabelCAKeys] + "|" + l[api.LabelCertRoot] + "|" + l[api.LabelCertTimes]
	if enc == k.lastLabels {
		return
	}
	if err := k.n.setLabels(ctx, l); err != nil {
		if !errors.Is(err, cluster.ErrClosed) { // a node leaving or stopping: nothing to tell
			k.log.Warn("could not gossip the CA labels", "err", err)
		}
		return
	}
	k.lastLabels = enc
}

// lead carries a rotation forward; only the leader does, so one node
// decides at a time, and a new leader picks up where the last one stopped.
func (k *caKeeper) lead(ctx context.Context, b consensus.TrustBundle) {
	active, ok := b.Active()
	if !ok {
		return
	}
	k.startLedger(ctx)
	members := k.n.cluster.Members()
	if b.Rotation != nil {
		pending, ok := b.Pending()
		switch {
		case !ok:
			k.makePending(ctx, b, active)
		case k.kr.Get(pending.Fingerprint) == nil && len(k.holders(false)[prefix(pending.Fingerprint)]) == 0:
			since, seen := k.lostSince[pending.Fingerprint]
			if !seen {
				k.lostSince[pending.Fingerprint] = time.Now()
			} else if time.Since(since) > pendingLostAfter {
				k.log.Warn("the new CA root's key reached no live node; making another", "lost", prefix(pending.Fingerprint))
				k.makePending(ctx, b, active)
			}
		case k.kr.Get(pending.Fingerprint) != nil:
			var waiting []string
			for _, m := range members {
				if m.Voter && m.State == cluster.StateAlive && !strings.Contains(m.Labels[api.LabelCAKeys], prefix(pending.Fingerprint)) {
					waiting = append(waiting, m.ID)
				}
			}
			if len(waiting) == 0 && k.propose(ctx, &raftpb.CATrust{Op: &raftpb.CATrust_Activate{Activate: &raftpb.CAActivate{Fingerprint: pending.Fingerprint}}}, "activate the new CA root") {
				k.log.Info("CA rotation: the new root is active; certificates renew onto it", "root", prefix(pending.Fingerprint), "old", prefix(active.Fingerprint))
			}
		}
	}
	for _, r := range b.Roots {
		if r.State != consensus.RootRetiring || time.Now().UnixMilli() < r.RetireAtMS {
			continue
		}
		var lagging []string
		for _, m := range members {
			if m.State == cluster.StateAlive && m.Labels[api.LabelCertRoot] != prefix(active.Fingerprint) {
				lagging = append(lagging, m.ID)
			}
		}
		if len(lagging) > 0 {
			if time.Since(k.lagLogged) > time.Minute {
				k.lagLogged = time.Now()
				k.log.Info("CA rotation: the old root stays trusted until these nodes renew onto the new one", "nodes", lagging, "old", prefix(r.Fingerprint))
			}
			continue
		}
		if k.propose(ctx, &raftpb.CATrust{Op: &raftpb.CATrust_Drop{Drop: &raftpb.CADropRoot{Fingerprint: r.Fingerprint}}}, "drop the retired CA root") {
			k.log.Info("CA rotation: the old root is no longer trusted", "root", prefix(r.Fingerprint))
		}
	}
}

// startLedger starts the certificate ledger of a cluster made before it
// (members registered, no ledger): certificates issued before now are
// accepted until they expire (at most consensus.MaxCertLifetimeMS), every
// one issued from now on must be in it. A new cluster's init node starts
// its ledger complete before registering any member.
func (k *caKeeper) startLedger(ctx context.Context) {
	st := k.n.store.State()
	if _, _, started := st.CertLedgerStarted(); started || len(st.Members("node")) == 0 || !k.n.cluster.AllSupport(cluster.FeatureCertLedger) {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := k.n.apply(cctx, &raftpb.Command{Cmd: &raftpb.Command_StartCertLedger{StartCertLedger: &raftpb.StartCertLedger{
		AtMs: time.Now().UnixMilli(), Reason: "a cluster made before the ledger: earlier certificates are accepted until they expire"}}})
	if err != nil && !errors.Is(err, consensus.ErrConflict) {
		k.log.Warn("could not start the certificate ledger", "err", err)
	}
}

// makePending makes a new root, cross-signed by the active one, and
// proposes it as the rotation's pending root. The new key is deleted again
// if the proposal fails.
func (k *caKeeper) makePending(ctx context.Context, b consensus.TrustBundle, active consensus.CARoot) {
	old := k.kr.Get(active.Fingerprint)
	if old == nil {
		return // a voter holding the active key leads soon enough
	}
	ca, err := k.kr.Create(k.n.state.ClusterName)
	if err != nil {
		k.log.Error("CA rotation: cannot make a new root", "err", err)
		return
	}
	cross, err := old.CrossSign(ca.Root())
	if err == nil && !k.propose(ctx, &raftpb.CATrust{Op: &raftpb.CATrust_Pending{Pending: &raftpb.CAAddPending{
		Der: ca.Root().Raw, CrossDer: cross.Raw, CrossFrom: active.Fingerprint}}}, "propose the new CA root") {
		err = errors.New("not committed")
	}
	if err != nil {
		k.log.Warn("CA rotation: the new root was not recorded; trying again", "err", err)
		_ = k.kr.Remove(ca.Fingerprint())
		return
	}
	k.log.Info("CA rotation: made a new root; voters fetch its key", "root", prefix(ca.Fingerprint()))
}
