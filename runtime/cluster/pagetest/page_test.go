package pagetest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/ffgen/ffgen/runtime/cluster"
)

// requireEnv makes a missing browser a failure instead of a skip, for
// machines that must run this test.
const requireEnv = "FFGEN_REQUIRE_BROWSER"

// screenshotEnv names the directory where the cluster test writes its
// screenshots (make screenshot points it at docs/); unset, they go to the
// test's temporary directory.
const screenshotEnv = "PAGETEST_SCREENSHOTS"

// chromium finds the browser: $CHROMIUM, else the usual names on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "SKIP: no Chromium found (install Debian's chromium package, or set CHROMIUM to the browser's path)"
	if os.Getenv(requireEnv) != "" {
		t.Fatal(msg + "; " + requireEnv + " is set")
	}
	t.Skip(msg)
	return ""
}

// browser starts headless Chromium with a fresh profile and the flags that
// keep it from reaching for the network, and returns a tab's context. Any
// exception thrown by the page fails the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	// Not t.TempDir: the browser's helper processes may still be writing
	// to the profile after the browser exits, which fails its removal.
	profile, err := os.MkdirTemp("", "pagetest-profile-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1440, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		for range 50 {
			if err := os.RemoveAll(profile); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("could not remove the browser profile %s", profile)
	})
	var mu sync.Mutex
	var thrown []string
	chromedp.ListenTarget(ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			mu.Lock()
			thrown = append(thrown, e.ExceptionDetails.Error())
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range thrown {
			t.Errorf("the page threw: %s", e)
		}
	})
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", chromium(t), err)
	}
	return ctx
}

// waitFor polls a JavaScript condition in the page until it is true.
func waitFor(t *testing.T, ctx context.Context, what, expr string, within time.Duration) {
	t.Helper()
	start := time.Now()
	var ok bool
	if err := chromedp.Run(ctx, chromedp.Poll(expr, &ok, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(within))); err != nil {
		t.Fatalf("waiting %v for the page to show %s: %v", within, what, err)
	}
	t.Logf("the page shows %s after %v", what, time.Since(start).Round(10*time.Millisecond))
}

// memberState is the state the page shows for a member.
func memberState(name string) string {
	return fmt.Sprintf(`(document.querySelector('[data-member=%q]') || {dataset: {}}).dataset.state`, name)
}

// TestPageFollowsKillAndRejoin starts four nodes (groups a and b, two
// each) with a bearer token and no cluster.Stats, opens a2's page, kills
// b1 and restarts it, and checks that the open page shows each step
// without being reloaded: live counters of what a2 served, b1's death, and
// the failovers a2's clients saw.
func TestPageFollowsKillAndRejoin(t *testing.T) {
	ctx := browser(t)
	const token = "page-test-token"
	a1 := startNode(t, "a1", "a", token, nil, false)
	seeds := []string{a1.addrs.Gossip}
	a2 := startNode(t, "a2", "a", token, seeds, true)
	b1 := startNode(t, "b1", "b", token, seeds, false)
	b2 := startNode(t, "b2", "b", token, seeds, false)
	nodes := map[string]*node{"a1": a1, "a2": a2, "b2": b2}

	// The management address itself, as an operator would type it: it
	// leads to the page, the token in the fragment coming along.
	url := "http://" + a2.addrs.Mgmt + "/#token=" + token
	if err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the page at the management address", `location.pathname === "/cluster/page/"`, 30*time.Second)
	allAlive := `["a1","a2","b1","b2"].every(n => (document.querySelector('[data-member="' + n + '"]') || {dataset: {}}).dataset.state === "alive")`
	waitFor(t, ctx, "four alive members", allAlive, 60*time.Second)
	// b1 joins the replicated service as a learner once the group has
	// formed; until it serves, no client routes to it, and its death
	// would cost no failover. Kill it only once every member serves.
	allServing := `["a1","a2","b1","b2"].every(n => { const d = (document.querySelector('[data-member="' + n + '"]') || {dataset: {}}).dataset;
	  return d.state === "alive" && d.catchingUp !== "true"; })`
	waitFor(t, ctx, "four members serving", allServing, 60*time.Second)
	// What a2 served of the load, from its server's own counters (no
	// Stats is wired): a rate, a count per method and a latency.
	waitFor(t, ctx, "calls served", `Number(document.querySelector('[data-tile="served"] .tile-value').textContent) > 0`, 30*time.Second)
	waitFor(t, ctx, "Balance served, with its latency",
		`(() => { const tr = document.querySelector('table.served tr[data-method="bank.Accounts.Balance"]');
		  return !!tr && Number(tr.dataset.served) > 0 && /ms|µs/.test(tr.children[6].textContent); })()`, 30*time.Second)
	// Live: the count goes on rising while the page is open.
	var served int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`Number(document.querySelector('table.served tr[data-method="bank.Accounts.Balance"]').dataset.served)`, &served)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "Balance's count rising", fmt.Sprintf(
		`Number((document.querySelector('table.served tr[data-method="bank.Accounts.Balance"]') || {dataset: {}}).dataset.served) > %d`, served), 30*time.Second)
	var fragment string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`location.hash`, &fragment)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fragment, token) {
		t.Errorf("the token stays in the address bar: %q", fragment)
	}

	b1.kill()
	t.Log("killed b1")
	waitFor(t, ctx, "b1 dead", memberState("b1")+` === "dead"`, 60*time.Second)
	waitFor(t, ctx, "the event of b1's death", `!!document.querySelector('#events [data-member="b1"][data-state="dead"]')`, 5*time.Second)
	waitFor(t, ctx, "a failover after the kill", `!!document.querySelector('#events [data-kind="failover"]')`, 30*time.Second)
	waitFor(t, ctx, "the failovers a2's clients saw", `!!document.querySelector('table.reported tr[data-client="local"]')`, 5*time.Second)
	screenshot(t, ctx, "cluster-page-dead.png")

	nodes["b1"] = startNode(t, "b1", "b", token, seeds, false)
	t.Log("restarted b1")
	waitFor(t, ctx, "b1 alive again", memberState("b1")+` === "alive"`, 60*time.Second)
	waitFor(t, ctx, "the event of b1's return", `!!document.querySelector('#events [data-member="b1"][data-state="alive"]')`, 5*time.Second)
	waitFor(t, ctx, "four alive members again", allAlive, 30*time.Second)
	screenshot(t, ctx, "cluster-page.png")

	// The replicated service, and on its leader's page every node's log:
	// all four, b1 among them once it rejoined.
	waitFor(t, ctx, "the replicated service's leader", `!!(document.querySelector('#replicas tr[data-service="bank.Accounts"]') || {dataset: {}}).dataset.leader`, 30*time.Second)
	var leader string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelector('#replicas tr[data-service="bank.Accounts"]').dataset.leader`, &leader)); err != nil {
		t.Fatal(err)
	}
	lead, ok := nodes[leader]
	if !ok {
		t.Fatalf("the page names %q as the leader, not one of the nodes", leader)
	}
	if err := chromedp.Run(ctx, chromedp.Navigate("http://"+lead.addrs.Mgmt+"/cluster/page/#token="+token)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "every node's log on the leader's page, b1 caught up",
		`["a1","a2","b1","b2"].every(n => { const tr = document.querySelector('tr[data-peer="' + n + '"]');
		  return !!tr && Number(tr.dataset.behind) < 100; })`, 60*time.Second)
	screenshot(t, ctx, "cluster-page-leader.png")
}

// screenshot saves the whole page as name, after two more answers, so that
// the rates cover the latest events.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var polls int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`Number(document.body.dataset.polls)`, &polls)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "two more answers", fmt.Sprintf(`Number(document.body.dataset.polls) >= %d`, polls+2), 30*time.Second)
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv(screenshotEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestPageAsksForTokenAndShowsNewStates loads the page without a token
// from a management handler whose member list carries a state and a field
// the page was not written for: it must ask for the token, then show both.
func TestPageAsksForTokenAndShowsNewStates(t *testing.T) {
	ctx := browser(t)
	const token = "fixture-token"
	since := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	members := `[
	 {"name":"a1","group":"a","address":"127.0.0.1:1","state":"alive","since":"` + since + `","local":true},
	 {"name":"b1","group":"b","address":"127.0.0.1:2","state":"alive","since":"` + since + `","catching_up":true},
	 {"name":"b2","group":"b","address":"127.0.0.1:3","state":"rejoining","since":"` + since + `"}]`
	mgmt := cluster.NewManagement(cluster.ManagementConfig{Members: fixedMembers{}, Token: token})
	mux := http.NewServeMux()
	mux.Handle("/", mgmt)
	ops := `[
	 {"side":"server","op_id":"01","service":"bank.Accounts","method":"Close","entities":["x"],"attempt":1,"node":"a1","started":"` + since + `","state":"held"},
	 {"side":"client","op_id":"02","service":"bank.Accounts","method":"Balance","entities":["y"],"attempt":2,"node":"b2","started":"` + since + `","state":"waiting"}]`
	// What a newer node would serve, behind the same token.
	fixture := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}
	}
	mux.Handle("GET /cluster/members", fixture(members))
	mux.Handle("GET /ops", fixture(ops))
	mux.Handle("GET /cluster/replicas", fixture(`[{"service":"bank.Accounts","ready":true,"role":"voter","leader":"a1","leading":true,
	  "term":3,"commit":40,"applied":40,"log_first":1,"log_last":52,"voters":["a1","b1"],
	  "peers":[{"node":"a1","match":52,"behind":0,"state":"replicate","active":true},
	           {"node":"b1","match":40,"behind":12,"state":"probe","active":false}]}]`))
	mux.Handle("GET /metrics", fixture("# TYPE ffgen_client_failovers_reported_total counter\n"+
		`ffgen_client_failovers_reported_total{client="loadgen",method="Balance",reason="conn-broken",service="bank.Accounts"} 7`+"\n"))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	if err := chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/cluster/page/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the token form", `!document.getElementById("auth").hidden`, 30*time.Second)
	if err := chromedp.Run(ctx,
		chromedp.SendKeys("#token", "wrong", chromedp.ByID),
		chromedp.Click("#auth button", chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the refusal of a wrong token", `document.getElementById("auth-msg").textContent.includes("refused")`, 30*time.Second)
	if err := chromedp.Run(ctx,
		chromedp.SendKeys("#token", token, chromedp.ByID),
		chromedp.Click("#auth button", chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the members", memberState("b2")+` === "rejoining"`, 30*time.Second)
	waitFor(t, ctx, "a badge for the unknown state",
		`document.querySelector('[data-member="b2"] .badge.state-other').textContent === "rejoining"`, 5*time.Second)
	waitFor(t, ctx, "a catching-up badge",
		`document.querySelector('[data-member="b1"] .badge.state-catching').textContent === "catching up"`, 5*time.Second)
	waitFor(t, ctx, "no catching-up badge on a member without the field",
		`!document.querySelector('[data-member="a1"] .badge.state-catching')`, 5*time.Second)
	waitFor(t, ctx, "one held operation", `document.querySelector('[data-tile="held"] .tile-value').textContent === "1"`, 5*time.Second)
	waitFor(t, ctx, "every node's log as the leader replicates it",
		`!!document.querySelector('tr[data-peer="b1"][data-behind="12"]') && !!document.querySelector('tr[data-peer="a1"][data-behind="0"]')`, 5*time.Second)
	waitFor(t, ctx, "the failovers a thin client reported",
		`(document.querySelector('table.reported tr[data-client="loadgen"]') || {textContent: ""}).textContent.includes("7")`, 5*time.Second)
	waitFor(t, ctx, "the failed-over operation marked",
		`[...document.querySelectorAll('#ops tr.failed-over td')].some(td => td.textContent === "bank.Accounts.Balance")`, 5*time.Second)
}

// fixedMembers serves the health route of the fixture: joined, no members.
type fixedMembers struct{}

func (fixedMembers) AllMembers() []cluster.MemberStatus         { return nil }
func (fixedMembers) Member(string) (cluster.MemberStatus, bool) { return cluster.MemberStatus{}, false }
func (fixedMembers) Joined() bool                               { return true }
