#!/usr/bin/env python3
"""The conversations of bench/summaries, made from a seed (standard library
only; the same seed gives the same bytes).

    python3 corpus.py [--seed 1] > corpus.json

Ten scenarios (five plain chats, five tool-using agent sessions), each made
twice with other planted values and another length (30-120 messages): 20
conversations.  Each is a list of messages in the shape ctxwin.messages
stores (OpenAI's: an assistant's tool_calls, tool results with
tool_call_id and name) and its probes:

  recall        a planted identifier or number, verbatim ("class":
                identifier or number)
  artifact      a file or record that changed ("target") and how ("change")
  continuation  the latest goal's key phrase, the superseded goal's, and the
                next step's
  decision      what was decided ("decision") and why ("reason")
  question      a question the user asked, by a key phrase, and whether it
                was answered later

Each agent session also has one long tool result (150 lines,
6 to 9 kB) with one planted identifier in it and nowhere else: at its start, in its
middle or at its end, as a durations list, a query's rows, a journal or a
CI log would have it.

Every conversation ends with TAIL messages of small talk that hold no
planted fact, at least min_recent_messages (6, the profile's default): the
summary covers the messages before them, where every probe's fact is
(corpus_check below and test/summaries_bench.pl check it).
"""
import argparse
import json
import random
import re

TAIL = 8                # messages of small talk at the end, no fact in them

TAIL_LINES = [
    ("Thanks, that is all for now.", "Glad to help. I will be here when you come back."),
    ("Great, talk to you later.", "Sounds good. Have a good rest of the day."),
    ("Perfect, I appreciate the patience.", "No trouble at all."),
    ("One more thing: thanks for explaining it so clearly.", "You are welcome, it was a good puzzle."),
    ("I will grab a coffee and come back.", "Enjoy the coffee."),
    ("Alright, I am logging off.", "Take care."),
]


class Conv:
    """A conversation being written: beats and filler slots, then assembled."""

    def __init__(self, cid, kind, title, rng, target_len):
        self.cid, self.kind, self.title, self.rng = cid, kind, title, rng
        self.target_len = target_len
        self.parts = []         # lists of messages, or None for a filler slot
        self.probes = []
        self.calls = 0
        self.filler = []        # (user, assistant) pairs of this scenario

    # --- messages ---------------------------------------------------------
    def user(self, text):
        self.parts.append([{"role": "user", "content": text}])

    def assistant(self, text):
        self.parts.append([{"role": "assistant", "content": text}])

    def tool(self, name, args, result, say=None):
        """An assistant's tool call, its result, and optionally what the
        assistant says of it."""
        self.calls += 1
        cid = "call_%s_%02d" % (re.sub(r"\W", "", self.cid), self.calls)
        msgs = [{"role": "assistant", "content": None,
                 "tool_calls": [{"id": cid, "type": "function",
                                 "function": {"name": name, "arguments": json.dumps(args, sort_keys=True)}}]},
                {"role": "tool", "tool_call_id": cid, "name": name, "content": result}]
        if say:
            msgs.append({"role": "assistant", "content": say})
        self.parts.append(msgs)

    def slot(self):
        self.parts.append(None)

    # --- probes -------------------------------------------------------------
    def recall(self, value, cls, what):
        self.probes.append({"kind": "recall", "class": cls, "what": what, "value": value})
        return value

    def artifact(self, target, change):
        self.probes.append({"kind": "artifact", "target": target, "change": change})

    def decision(self, decision, reason):
        self.probes.append({"kind": "decision", "decision": decision, "reason": reason})

    def goals(self, latest, superseded, next_step):
        self.probes.append({"kind": "continuation", "latest_goal": latest,
                            "superseded_goal": superseded, "next_step": next_step})

    def question(self, phrase, answered):
        self.probes.append({"kind": "question", "phrase": phrase, "answered": answered})

    # --- assembly -----------------------------------------------------------
    def done(self):
        base = sum(len(p) for p in self.parts if p is not None) + TAIL
        slots = [i for i, p in enumerate(self.parts) if p is None]
        pairs = max(0, (self.target_len - base) // 2)
        per = [0] * len(slots)
        for _ in range(pairs):
            per[self.rng.randrange(len(slots))] += 1
        out, k, f = [], 0, 0
        for p in self.parts:
            if p is None:
                for _ in range(per[k]):
                    u, a = self.filler[f % len(self.filler)]
                    f += 1
                    out += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
                k += 1
            else:
                out += p
        tail = self.rng.sample(TAIL_LINES, TAIL // 2)
        for u, a in tail:
            out += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        return {"id": self.cid, "kind": self.kind, "title": self.title,
                "messages": out, "tail": TAIL, "probes": self.probes}


# --- planted values -----------------------------------------------------------
def money(rng, lo, hi):
    cents = rng.randrange(lo * 100, hi * 100)
    return "${:,}.{:02d}".format(cents // 100, cents % 100)


def date(rng, month_lo=1, month_hi=12):
    return "2026-%02d-%02d" % (rng.randint(month_lo, month_hi), rng.randint(1, 28))


def host(rng, role):
    return "%s-%s-%d.%s.internal" % (role, rng.choice(["eu", "us", "ap"]), rng.randint(2, 9),
                                      rng.choice(["prod", "stage", "ops"]))


def pick(rng, xs):
    return rng.choice(xs)


LOG_LINES = {
    "pytest": ["%.2fs call tests/unit/test_case_%d.py::test_step", "%.2fs setup tests/unit/test_case_%d.py::test_step"],
    "journal": ["postgres[%d]: LOG:  checkpoint starting: time, %d buffers", "postgres[%d]: LOG:  automatic vacuum of table done, pages %d"],
    "rows": ["CUS-%06d | customer%d@example.net | active", "CUS-%06d | customer%d@example.net | inactive"],
    "ci": ["npm http fetch GET 200 registry package %d (%d ms)", "npm timing reify:unpack step %d done in %d ms"],
    "orders": ["SO-%06d | delivered | %d items", "SO-%06d | delivered | %d items, gift wrap"],
}


def long_output(rng, kind, planted, where, n=150):
    """A tool result of n lines (6 to 9 kB: longer than the 4,000
    characters 0.2.0's extractive strategy read of a tool result and than
    the 400 tokens the LLM's transcript keeps of one), its one planted line
    at the start, in the middle or at the end."""
    lines = []
    for i in range(n):
        t = rng.choice(LOG_LINES[kind])
        a = rng.randint(100000, 999999) if kind in ("rows", "orders") else (
            rng.uniform(0.01, 2.0) if kind == "pytest" else rng.randint(1000, 9999))
        lines.append(t % (a, rng.randint(2, 400)))
    at = {"start": 1, "middle": n // 2, "end": n - 1}[where]
    lines.insert(at, planted)
    return "\n".join(lines)


# --- the chats ----------------------------------------------------------------
def chat_parcel(c):
    r = c.rng
    order = c.recall("ORD-%05d" % r.randint(10000, 99999), "identifier", "order number")
    due = c.recall(date(r, 2, 4), "number", "due date")
    amount = c.recall(money(r, 60, 900), "number", "order amount")
    tracking = c.recall("TRK%09d" % r.randint(10 ** 8, 10 ** 9 - 1), "identifier", "tracking number")
    depot = c.recall(pick(r, ["Rotterdam", "Leipzig", "Lyon"]) + " depot", "identifier", "depot")
    credit = c.recall(money(r, 20, 59), "number", "goodwill credit")
    c.filler = [
        ("The box was meant to be a birthday present, so I am a bit stressed.", "Understood, let us sort it out step by step."),
        ("I checked with my neighbours and nobody took it in.", "Thanks for checking, that rules out one common cause."),
        ("The courier app just shows a spinning wheel for me.", "The app is often behind the carrier's own records."),
        ("I have been a customer for years and this never happened before.", "I am sorry it happened now, and I appreciate your patience."),
        ("My building has a parcel locker in the lobby too.", "Good to know, some carriers use those when nobody answers."),
    ]
    c.user("Hi. Please help me find out where my parcel went: order %s was due on %s and never showed up." % (order, due))
    c.assistant("Happy to help trace the parcel for order %s. I can see it was paid, %s in total, and shipped with tracking number %s." % (order, amount, tracking))
    c.slot()
    c.user("Was it ever scanned after it left the warehouse?")
    c.assistant("The last scan is at the %s, two days before the due date. I am asking the carrier for more." % depot)
    c.question("scanned after it left the warehouse", True)
    c.slot()
    c.user("Can you also tell me whether my loyalty points were added for this order?")
    c.question("loyalty points", False)
    c.assistant("I cannot see the loyalty ledger from here; that team has to confirm it.")
    c.slot()
    c.user("You know what, forget the tracking. I no longer want the parcel: I want a full refund to my original card instead.")
    c.goals("full refund to my original card", "where my parcel went", "confirmation email")
    c.assistant("Understood, the goal is now a full refund to your original card for order %s." % order)
    c.slot()
    c.assistant("We decided to refund the full %s rather than reship, because the carrier cannot locate the parcel at the %s." % (amount, depot))
    c.decision("refund the full", "carrier cannot locate the parcel")
    c.user("Fine by me. And the parcel was scanned after it left the warehouse, right?")
    c.assistant("Yes: it was scanned once after it left the warehouse, at the %s, and nothing after that." % depot)
    c.slot()
    c.assistant("I also changed the order status of %s from shipped to refunded in our system." % order)
    c.artifact(order, "refunded")
    c.assistant("We agreed to add a goodwill credit of %s because the delay ruined a birthday present." % credit)
    c.decision("goodwill credit", "ruined a birthday present")
    c.slot()
    c.assistant("Next step: I will send you the refund confirmation email once the card network accepts it.")
    c.user("Thank you, I will watch my inbox.")


def chat_trip(c):
    r = c.rng
    booking = c.recall("BK-%s" % "".join(r.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6)), "identifier", "booking reference")
    flight = c.recall("TP%d" % r.randint(1000, 1999), "identifier", "flight number")
    fare = c.recall(money(r, 180, 640), "number", "fare")
    depart = c.recall(date(r, 5, 7), "number", "departure date")
    nights = c.recall("%d nights" % r.randint(3, 6), "number", "nights")
    hotel = c.recall("Hotel %s" % pick(r, ["Miradouro", "Ribeira Azul", "Casa do Largo"]), "identifier", "hotel")
    c.filler = [
        ("I like window seats, but it is not a big deal.", "Noted, I will prefer a window seat where there is a choice."),
        ("I am not a fan of very early flights.", "Understood, I will avoid the first departures of the day."),
        ("My partner may join for the weekend, we will see.", "We can adjust the room later if that happens."),
        ("I have only a carry-on bag, nothing to check in.", "That keeps the fare simple."),
        ("I would like to walk to the old town from the hotel.", "I will favour central places within walking distance."),
    ]
    c.user("I want to plan a relaxed holiday in Lisbon for myself, mostly museums and food.")
    c.assistant("A relaxed holiday in Lisbon sounds lovely. Do you have dates in mind?")
    c.slot()
    c.user("I could leave on %s and stay %s." % (depart, nights))
    c.assistant("Flight %s leaves that morning, the fare is %s return with a carry-on." % (flight, fare))
    c.slot()
    c.user("Does the fare include seat selection?")
    c.question("include seat selection", True)
    c.assistant("Let me check the fare rules before I answer that.")
    c.slot()
    c.user("Change of plans: my employer is sending me to the Porto conference on packaging instead, so the trip is now a work trip to Porto.")
    c.goals("work trip to Porto", "relaxed holiday in Lisbon", "expense pre-approval")
    c.assistant("Understood, we now plan a work trip to Porto for the conference on packaging.")
    c.slot()
    c.assistant("I found the fare rules: the fare does include seat selection, so no extra charge for a window seat.")
    c.user("Good. Which hotel do you suggest near the venue?")
    c.assistant("I booked %s for %s, booking reference %s." % (hotel, nights, booking))
    c.artifact(booking, "booked")
    c.slot()
    c.assistant("We chose the train from Porto airport instead of a taxi because the conference refunds public transport only.")
    c.decision("train from Porto airport", "refunds public transport only")
    c.user("Will the conference dinner be vegetarian-friendly?")
    c.question("conference dinner be vegetarian", False)
    c.assistant("The organisers have not published the dinner menu yet.")
    c.slot()
    c.assistant("Next step: submit the expense pre-approval form with the fare and the hotel before you pay anything else.")
    c.user("Okay, I will do that tomorrow morning.")


def chat_tls(c):
    r = c.rng
    web = c.recall(host(r, "web"), "identifier", "hostname")
    new = c.recall(host(r, "edge"), "identifier", "new hostname")
    conf = c.recall("/etc/nginx/sites-enabled/%s.conf" % pick(r, ["shop", "portal", "blog"]), "identifier", "file path")
    code = c.recall("ERR_CERT_DATE_INVALID", "identifier", "error code")
    days = c.recall("%d days" % r.randint(3, 12), "number", "days left")
    port = c.recall("port %d" % r.choice([8443, 9443, 10443]), "number", "port")
    c.filler = [
        ("I run this box mostly on weekends, so bear with me.", "No problem, we can go slowly."),
        ("I am not very comfortable with the command line.", "I will spell out every command."),
        ("The server is in a cupboard at my office.", "Fine, as long as it is reachable over the network."),
        ("I made a backup of the whole machine last month.", "Good, that is a safety net if anything goes wrong."),
        ("The website is small, a few hundred visitors a day.", "Then a short outage at night would hardly be noticed."),
    ]
    c.user("Visitors of my site get %s in the browser. I want to get the TLS certificate renewal working again on %s." % (code, web))
    c.goals("move the site to", "certificate renewal working", "switch the DNS record")
    c.assistant("Let us look at the certificate renewal. The current certificate expires in %s, so there is a little time." % days)
    c.slot()
    c.user("The nginx config is %s, is that the one that matters?" % conf)
    c.question("one that matters", True)
    c.assistant("I need to see the server block first before I can say.")
    c.slot()
    c.user("Honestly the old machine is dying. Instead of fixing renewal there, I want to move the site to the new server %s." % new)
    c.assistant("Understood: we move the site to %s and let the old host retire." % new)
    c.slot()
    c.assistant("Having read the server block: yes, %s is the one that matters, the other files are disabled." % conf)
    c.assistant("We decided to serve the site on %s behind the proxy, because the provider blocks the standard port on that network." % port)
    c.decision("behind the proxy", "blocks the standard port")
    c.slot()
    c.assistant("I copied %s to the new server and changed its listen line to %s." % (conf, port))
    c.artifact(conf, "listen line")
    c.user("Should I keep the old machine running as a fallback for a while?")
    c.question("fallback for a while", False)
    c.assistant("That depends on your backup plans; we can decide it once the move is done.")
    c.slot()
    c.assistant("Next step: switch the DNS record to %s, then watch the logs for an hour." % new)
    c.user("Got it.")


def chat_invoices(c):
    r = c.rng
    inv1 = c.recall("INV-2026-%04d" % r.randint(100, 999), "identifier", "invoice")
    inv2 = c.recall("INV-2026-%04d" % r.randint(1000, 1999), "identifier", "invoice")
    total = c.recall(money(r, 1000, 9000), "number", "invoice total")
    diff = c.recall("$0.0%d" % r.randint(1, 9), "number", "rounding difference")
    lines = c.recall("%d line items" % r.randint(40, 90), "number", "line items")
    vat = c.recall("%d%%" % r.choice([19, 20, 21]), "number", "VAT rate")
    c.filler = [
        ("Our accountant is strict about these things.", "Rightly so, small differences add up."),
        ("The spreadsheet is shared with two colleagues.", "Then let us note every change we make."),
        ("We switched accounting software last year.", "Migrations are a common source of such differences."),
        ("I have the PDFs open in another window.", "Good, we can compare them side by side."),
        ("March was a busy month for us.", "That explains the number of invoices."),
    ]
    c.user("I need to reconcile the March invoices against the bank statement before the audit.")
    c.assistant("Let us reconcile the March invoices. Which one would you like to start with?")
    c.slot()
    c.user("%s shows %s but the bank received a slightly different amount. It has %s." % (inv1, total, lines))
    c.assistant("The difference on %s is %s, which looks like rounding per line rather than per invoice." % (inv1, diff))
    c.slot()
    c.user("Is the VAT computed on each line or on the total?")
    c.question("computed on each line or on the total", True)
    c.assistant("I will find out from the export settings.")
    c.slot()
    c.user("Wait. The reconciliation can wait: I want to fix the rounding bug in the invoice totals first, otherwise every month will be off.")
    c.goals("rounding bug in the invoice totals", "reconcile the March invoices", "re-export")
    c.assistant("Agreed, the rounding bug in the invoice totals comes first.")
    c.slot()
    c.assistant("From the export settings: the VAT of %s is computed on each line, then the lines are rounded, which causes the drift." % vat)
    c.assistant("We decided to round only the invoice total, not each line, because the tax office accepts rounding once per invoice.")
    c.decision("round only the invoice total", "rounding once per invoice")
    c.slot()
    c.assistant("I corrected %s: the total is now rounded once and matches the bank." % inv2)
    c.artifact(inv2, "rounded once")
    c.user("Do we need to tell the clients who already paid the old amounts?")
    c.question("tell the clients who already paid", False)
    c.assistant("That is a question for your accountant; I would not guess.")
    c.slot()
    c.assistant("Next step: re-export March with the new rounding and compare it to the bank statement.")
    c.user("Sounds like a plan.")


def chat_survey(c):
    r = c.rng
    path = c.recall("data/survey_2025_%s.csv" % pick(r, ["wave1", "wave2", "final"]), "identifier", "file path")
    rows = c.recall("%d responses" % r.randint(1200, 4800), "number", "responses")
    dropped = c.recall("%d duplicates" % r.randint(30, 190), "number", "duplicates")
    meeting = c.recall(date(r, 9, 11), "number", "board meeting date")
    share = c.recall("%d.%d%%" % (r.randint(40, 70), r.randint(0, 9)), "number", "share")
    fig = c.recall("figures/retention_by_region.png", "identifier", "figure path")
    c.filler = [
        ("I am more of a spreadsheet person, to be honest.", "That is fine, I will explain each step in plain terms."),
        ("The survey was run by an agency for us.", "Agencies usually deliver consistent column names, which helps."),
        ("Some answers are in free text and quite long.", "We can leave those aside for this analysis."),
        ("My manager likes simple charts.", "Then bars with clear labels will do."),
        ("We ran the same survey two years ago.", "That could give us a comparison later."),
    ]
    c.user("I want to clean the customer survey so that we can compute satisfaction per region. The file is %s with %s." % (path, rows))
    c.assistant("Let us clean the customer survey first. I see %s that share an email and a timestamp." % dropped)
    c.slot()
    c.user("Are the duplicates from the same people answering twice?")
    c.question("answering twice", True)
    c.assistant("I cannot tell yet; I need to compare their answers.")
    c.slot()
    c.user("New priority: forget the per-region satisfaction. I need a retention chart for the board meeting on %s." % meeting)
    c.goals("retention chart for the board meeting", "clean the customer survey", "caption")
    c.assistant("Understood, the retention chart for the board meeting is the priority now.")
    c.slot()
    c.assistant("I compared them: yes, the duplicates are the same people answering twice, with identical answers.")
    c.assistant("We decided to drop the duplicate answers rather than average them, because they are exact copies from a resubmitted form.")
    c.decision("drop the duplicate answers", "resubmitted form")
    c.slot()
    c.assistant("I saved the chart as %s; retention is %s overall." % (fig, share))
    c.artifact(fig, "saved the chart")
    c.user("Should we show confidence intervals on the chart?")
    c.question("confidence intervals", False)
    c.assistant("That depends on how technical the board is; you know them better.")
    c.slot()
    c.assistant("Next step: write a one-line caption for the chart and send it to your manager for review.")
    c.user("I will draft it tonight.")


# --- the agent sessions -----------------------------------------------------------
def agent_rounding(c):
    r = c.rng
    test = c.recall("tests/test_export.py", "identifier", "test file")
    src = c.recall("src/billing/totals.py", "identifier", "source file")
    code = c.recall("AssertionError", "identifier", "error name")
    ticket = c.recall("BILL-%d" % r.randint(100, 999), "identifier", "ticket")
    amt = c.recall(money(r, 100, 999), "number", "expected total")
    n = c.recall("%d passed" % r.randint(80, 240), "number", "tests passed")
    c.filler = [
        ("Take your time, I am in meetings anyway.", "Thanks, I will keep going and report back."),
        ("Remember the style guide: no print statements.", "Understood, no print statements."),
        ("The CI is slow today, ignore its queue.", "Noted, I will run the tests locally."),
        ("Keep the commits small please.", "I will keep each change small and focused."),
    ]
    c.user("The export test in %s is flaky on CI. Please make the flaky export test reliable." % test)
    c.tool("read_file", {"path": test}, "def test_export_order():\n    rows = export(sample_orders)\n    assert rows[0]['total'] == expected\n", "The test compares exported totals with an expected value.")
    c.slot()
    c.tool("run_command", {"cmd": "pytest -q %s" % test}, "F\n%s: assert 'export' in result\n1 failed in 2.3s" % code, "It fails with %s on the first run." % code)
    c.user("Is the failure caused by the test order?")
    c.question("caused by the test order", True)
    c.assistant("I need to run it in isolation before I can tell.")
    c.slot()
    c.user("Stop the flaky test work. Customers report wrong invoice totals (%s); fix the rounding bug in %s first." % (ticket, src))
    c.goals("rounding bug", "flaky export test", "release note")
    c.tool("read_file", {"path": src}, "def total(lines):\n    return sum(round(l.price * l.qty, 2) for l in lines)\n", "The total rounds every line with float arithmetic.")
    c.slot()
    c.tool("run_command", {"cmd": "pytest -q -p no:randomly %s" % test}, "1 failed in 2.1s", "Run in isolation it still fails, so the failure is not caused by the test order.")
    c.assistant("We decided to use Decimal with ROUND_HALF_UP for the totals, because float rounding drifts by a cent on large orders.")
    c.decision("Decimal with ROUND_HALF_UP", "float rounding drifts")
    c.tool("edit_file", {"path": src, "change": "replace float rounding with Decimal quantize"}, "ok: %s updated, 4 lines changed" % src, "I replaced the float rounding with Decimal quantize in %s." % src)
    c.artifact(src, "Decimal quantize")
    c.slot()
    slow = c.recall("tests/test_pdf_render.py", "identifier", "path at the start of a long tool result")
    c.tool("run_command", {"cmd": "pytest -q --durations=0"},
           long_output(r, "pytest", "41.71s call %s::test_big_invoice" % slow, "start"), "The durations are long but nothing fails.")
    c.tool("run_command", {"cmd": "pytest -q"}, "%s in 14.2s" % n, "All tests pass; the sample order now totals %s as expected." % amt)
    c.user("Should we backfill the totals of invoices already sent?")
    c.question("backfill the totals", False)
    c.assistant("That needs a decision from finance; I have not touched stored invoices.")
    c.slot()
    c.assistant("Next step: write the release note for %s and open the pull request." % ticket)
    c.user("Go ahead.")


def agent_disk(c):
    r = c.rng
    h = c.recall(host(r, "db"), "identifier", "hostname")
    rep = c.recall(host(r, "replica"), "identifier", "replica hostname")
    used = c.recall("%d%%" % r.randint(91, 99), "number", "disk used")
    lag = c.recall("%d MB" % r.randint(300, 4000), "number", "replication lag")
    logdir = c.recall("/var/log/postgresql", "identifier", "log directory")
    slot = c.recall("analytics_slot", "identifier", "replication slot")
    c.filler = [
        ("Let me know before you restart anything.", "I will ask before any restart."),
        ("The on-call phone is with me tonight.", "Good, I will keep you posted here."),
        ("We had a similar alert last quarter.", "I will check whether the cause is the same."),
        ("Do not touch the application servers.", "Understood, I stay on the database hosts."),
    ]
    c.user("The disk alert fired on %s. Please free disk space on the primary before it fills up." % h)
    c.tool("run_command", {"host": h, "cmd": "df -h /var/lib/postgresql"}, "/dev/nvme1n1  500G  %s  /var/lib/postgresql" % used, "The data volume is at %s." % used)
    c.slot()
    c.tool("run_command", {"host": h, "cmd": "du -sh %s" % logdir}, "41G\t%s" % logdir, "The logs take a large share of it.")
    c.user("Are the old WAL files being kept by a replication slot?")
    c.question("kept by a replication slot", True)
    c.assistant("I will check the slots next.")
    c.slot()
    c.user("Change of focus: the replica %s is lagging badly and reports depend on it. Fix the replica lag first, the disk can wait an hour." % rep)
    c.goals("replica lag", "free disk space", "monitor the lag")
    c.tool("query_db", {"host": h, "sql": "SELECT slot_name, active FROM pg_replication_slots"}, "%s | f" % slot, "An inactive slot, %s, holds old WAL files: yes, they are kept by a replication slot." % slot)
    c.slot()
    seg = c.recall("00000001%08X000000%02X" % (r.randint(0x100, 0xFFF), r.randint(0x10, 0xFF)), "identifier",
                   "WAL segment at the end of a long tool result")
    c.tool("run_command", {"host": h, "cmd": "journalctl -u postgresql --since today"},
           long_output(r, "journal", "postgres[%d]: LOG:  archive command failed for WAL file %s" % (r.randint(1000, 9999), seg), "end"),
           "The journal is long; I will come back to it after the lag.")
    c.tool("query_db", {"host": rep, "sql": "SELECT pg_wal_lsn_diff(...)"}, "lag: %s" % lag, "The replica is %s behind." % lag)
    c.assistant("We decided to drop the inactive slot %s, because the analytics job that used it was retired." % slot)
    c.decision("drop the inactive slot", "was retired")
    c.tool("query_db", {"host": h, "sql": "SELECT pg_drop_replication_slot('%s')" % slot}, "dropped", "I dropped the slot %s on the primary." % slot)
    c.artifact(slot, "dropped")
    c.slot()
    c.user("Should we add an alert on inactive slots?")
    c.question("alert on inactive slots", False)
    c.assistant("That is a change to the monitoring config, which the platform team owns.")
    c.slot()
    c.assistant("Next step: monitor the lag on %s for the next hour and then rotate the logs in %s." % (rep, logdir))
    c.user("Thanks, keep me posted.")


def agent_customers(c):
    r = c.rng
    cust = c.recall("CUS-%06d" % r.randint(100000, 999999), "identifier", "customer id")
    dup = c.recall("CUS-%06d" % r.randint(100000, 999999), "identifier", "duplicate customer id")
    batch = c.recall("RFB-%d" % r.randint(2000, 2999), "identifier", "refund batch")
    count = c.recall("%d refunds" % r.randint(12, 80), "number", "refund count")
    total = c.recall(money(r, 2000, 20000), "number", "batch total")
    when = c.recall(date(r, 6, 8), "number", "payout date")
    c.filler = [
        ("Use the read replica for lookups where you can.", "I will read from the replica and write to the primary."),
        ("The CRM is slow in the afternoon.", "I will keep the queries small."),
        ("Log everything you change, please.", "Every change goes in the audit log."),
        ("Finance reviews these numbers on Fridays.", "I will have a clean summary ready."),
    ]
    c.user("Please deduplicate the customer records: we have people registered twice in the CRM.")
    c.tool("query_db", {"sql": "SELECT email, count(*) FROM customers GROUP BY email HAVING count(*) > 1"}, "ana@example.org | 2", "One email has two records.")
    c.slot()
    c.tool("lookup_customer", {"email": "ana@example.org"}, json.dumps([{"id": cust}, {"id": dup}]), "The two records are %s and %s." % (cust, dup))
    c.user("Which of the two has the order history?")
    c.question("has the order history", True)
    c.assistant("I will compare both records before merging.")
    c.slot()
    c.user("Pause the dedup. Finance needs the refund batch %s paid out on %s; get that done first." % (batch, when))
    c.goals("refund batch", "deduplicate the customer records", "batch summary to finance")
    c.tool("query_db", {"sql": "SELECT count(*), sum(amount) FROM refunds WHERE batch = '%s'" % batch}, "%s | %s" % (count, total), "The batch holds %s totalling %s." % (count, total))
    c.slot()
    cb = c.recall("CB-%d" % r.randint(20000, 29999), "identifier", "chargeback id in the middle of a long tool result")
    c.tool("query_db", {"sql": "SELECT id, email, status FROM customers ORDER BY created_at"},
           long_output(r, "rows", "%s | ana@example.org | chargeback %s open" % (dup, cb), "middle"),
           "That is the full customer list; both records of the email are in it.")
    c.tool("lookup_orders", {"customer": cust}, "37 orders", "%s has the order history; the other record has none." % cust)
    c.assistant("We decided to keep %s as the surviving record, because it has the order history." % cust)
    c.decision("surviving record", "because it has the order history")
    c.tool("update_record", {"table": "customers", "id": dup, "set": {"merged_into": cust}}, "1 row updated", "I marked %s as merged into %s." % (dup, cust))
    c.artifact(dup, "merged into")
    c.slot()
    c.user("Can we automate the duplicate check every night?")
    c.question("automate the duplicate check", False)
    c.assistant("Possibly, but the scheduler belongs to the data team.")
    c.slot()
    c.assistant("Next step: send the batch summary to finance for sign-off before the payout.")
    c.user("Okay.")


def agent_ci(c):
    r = c.rng
    job = c.recall("build-%d" % r.randint(4000, 9999), "identifier", "CI job")
    code = c.recall("E%d" % r.randint(1000, 9999), "identifier", "error code")
    lock = c.recall("package-lock.json", "identifier", "lock file")
    ver = c.recall("v2.%d.%d" % (r.randint(1, 9), r.randint(0, 9)), "identifier", "release version")
    mins = c.recall("%d min" % r.randint(11, 40), "number", "build time")
    pin = c.recall("left-pad@1.3.0", "identifier", "pinned dependency")
    c.filler = [
        ("The runners were upgraded last week.", "I will keep that in mind when reading the logs."),
        ("Do not force-push to main.", "Understood, only pull requests."),
        ("The team is in another time zone.", "I will leave clear notes for them."),
        ("Cache misses are common on Mondays.", "Then a slow first build is expected."),
    ]
    c.user("CI job %s is red. Please get the main branch build green again." % job)
    c.tool("ci_logs", {"job": job}, "npm ERR! code %s\nnpm ERR! peer dependency conflict\nbuild took %s" % (code, mins), "The install step fails with %s, a peer dependency conflict." % code)
    c.slot()
    c.user("Did the failure start with the runner upgrade?")
    c.question("start with the runner upgrade", True)
    c.assistant("I will compare with the last green build first.")
    c.slot()
    c.user("New plan: the release can't wait. Tag the release %s from the last green commit today, and fix the build afterwards." % ver)
    c.goals("Tag the release", "build green again", "publish the release notes")
    pkg = c.recall("@acme/ui-kit@4.%d.0-beta.%d" % (r.randint(1, 9), r.randint(1, 9)), "identifier",
                   "package at the end of a long tool result")
    c.tool("ci_logs", {"job": job, "full": True},
           long_output(r, "ci", "npm ERR! notarget No matching version found for %s" % pkg, "end"),
           "The full log is long; the install step is where it stops.")
    c.tool("ci_logs", {"job": "last-green"}, "runner: ubuntu-24.04\nok", "The last green build ran on the upgraded runner too, so the failure did not start with the runner upgrade.")
    c.slot()
    c.assistant("We decided to pin the left-pad version in %s, because the newer release broke the peer range." % lock)
    c.decision("pin the left-pad version", "broke the peer range")
    c.tool("edit_file", {"path": lock, "change": "pin %s" % pin}, "ok: %s updated" % lock, "I pinned %s in %s." % (pin, lock))
    c.artifact(lock, "pinned")
    c.slot()
    c.tool("run_command", {"cmd": "git tag %s && git push origin %s" % (ver, ver)}, "tag pushed", "The tag %s is pushed." % ver)
    c.user("Should we drop support for the old Node version?")
    c.question("drop support for the old Node", False)
    c.assistant("That is a product decision I cannot take.")
    c.slot()
    c.assistant("Next step: publish the release notes for %s and then watch the next build." % ver)
    c.user("Thanks.")


def agent_address(c):
    r = c.rng
    order = c.recall("SO-%d" % r.randint(300000, 399999), "identifier", "order number")
    zipc = c.recall("%05d" % r.randint(10000, 99999), "number", "postcode")
    amt = c.recall(money(r, 40, 400), "number", "refund amount")
    case = c.recall("CASE-%d" % r.randint(50000, 59999), "identifier", "case number")
    wh = c.recall(pick(r, ["Bremen", "Tilburg", "Gdansk"]) + " warehouse", "identifier", "warehouse")
    eta = c.recall(date(r, 3, 5), "number", "delivery date")
    c.filler = [
        ("The customer is polite but in a hurry.", "I will keep my replies short."),
        ("Our policy allows cancellations before dispatch.", "I will check the dispatch status first."),
        ("Please write the email in a friendly tone.", "Friendly and short, understood."),
        ("The CRM shows notes from earlier calls.", "I will read them before acting."),
    ]
    c.user("Customer asks to change the delivery address of order %s to a new flat, postcode %s." % (order, zipc))
    c.goals("cancel the order", "change the delivery address", "refund email")
    c.tool("lookup_order", {"order": order}, json.dumps({"order": order, "status": "packed", "warehouse": wh, "eta": eta}), "The order is packed at the %s, due on %s." % (wh, eta))
    c.slot()
    c.user("Can the courier still reroute a packed order?")
    c.question("reroute a packed order", True)
    c.assistant("I will look at the courier's rules.")
    c.slot()
    c.user("The customer called again: she no longer wants it at all. Please cancel the order and refund her instead of changing the address.")
    label = c.recall("LBL-%d-%s" % (r.randint(10000, 99999), r.choice("ABCD")), "identifier",
                     "label in the middle of a long tool result")
    c.tool("order_history", {"customer_of": order},
           long_output(r, "orders", "SO-%06d | returned | label %s" % (r.randint(100000, 299999), label), "middle"),
           "She is a long-standing customer with many delivered orders.")
    c.tool("courier_rules", {"status": "packed"}, "reroute: allowed until dispatch", "The courier can still reroute a packed order, but that no longer matters.")
    c.slot()
    c.assistant("We decided to cancel before dispatch instead of a return, because a return would cost her the shipping fee.")
    c.decision("cancel before dispatch", "cost her the shipping fee")
    c.tool("update_order", {"order": order, "status": "cancelled"}, "ok", "I set %s to cancelled." % order)
    c.artifact(order, "cancelled")
    c.tool("create_refund", {"order": order, "amount": amt}, json.dumps({"case": case, "amount": amt}), "Refund case %s opened for %s." % (case, amt))
    c.artifact(case, "opened")
    c.slot()
    c.user("Will she get a voucher for the trouble?")
    c.question("voucher for the trouble", False)
    c.assistant("Vouchers need a supervisor's approval.")
    c.slot()
    c.assistant("Next step: send her the refund email with case %s." % case)
    c.user("Please do.")


SCENARIOS = [
    ("chat", "parcel refund", chat_parcel),
    ("chat", "trip planning", chat_trip),
    ("chat", "TLS and server move", chat_tls),
    ("chat", "invoice rounding", chat_invoices),
    ("chat", "survey chart", chat_survey),
    ("agent", "flaky test, rounding bug", agent_rounding),
    ("agent", "disk and replica lag", agent_disk),
    ("agent", "customer dedup, refund batch", agent_customers),
    ("agent", "CI build, release tag", agent_ci),
    ("agent", "address change, cancel", agent_address),
]


def corpus(seed):
    out = []
    for variant in (1, 2):
        for k, (kind, title, make) in enumerate(SCENARIOS):
            rng = random.Random("%d/%d/%s" % (seed, variant, make.__name__))
            # variant 1 short, variant 2 long
            target = rng.randint(30, 60) if variant == 1 else rng.randint(80, 120)
            c = Conv("%s-%s-%d" % (kind, make.__name__.split("_", 1)[1], variant), kind, title, rng, target)
            make(c)
            out.append(c.done())
    return out


# --- checks --------------------------------------------------------------------------
def message_text(m):
    """A message's text as a summarizer may see it: its content, then each
    tool call's name and arguments."""
    parts = [m.get("content") or ""]
    for tc in m.get("tool_calls") or []:
        f = tc.get("function") or {}
        parts.append(f.get("name") or "")
        parts.append(f.get("arguments") or "")
    return "\n".join(parts)


def probe_strings(p):
    """The strings a probe looks for: (string, exact?)."""
    if p["kind"] == "recall":
        return [(p["value"], True)]
    if p["kind"] == "artifact":
        return [(p["target"], True), (p["change"], False)]
    if p["kind"] == "continuation":
        return [(p["latest_goal"], False), (p["superseded_goal"], False), (p["next_step"], False)]
    if p["kind"] == "decision":
        return [(p["decision"], False), (p["reason"], False)]
    return [(p["phrase"], False)]


def corpus_check(conv, covered=None):
    """Problems with a conversation: its length, its tail, a probe whose
    strings are not in the messages a summary covers (covered: how many of
    the first messages; default all but the tail), a tail that holds one."""
    msgs = conv["messages"]
    covered = len(msgs) - conv["tail"] if covered is None else covered
    body = "\n".join(message_text(m) for m in msgs[:covered])
    tail = "\n".join(message_text(m) for m in msgs[covered:])
    problems = []
    if not 30 <= len(msgs) <= 120:
        problems.append("%s: %d messages, not 30-120" % (conv["id"], len(msgs)))
    for p in conv["probes"]:
        for s, exact in probe_strings(p):
            if (s not in body) if exact else (s.lower() not in body.lower()):
                problems.append("%s: %s probe %r not in the messages summarized" % (conv["id"], p["kind"], s))
            if (s in tail) if exact else (s.lower() in tail.lower()):
                problems.append("%s: %s probe %r in the tail" % (conv["id"], p["kind"], s))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="check the corpus instead of printing it")
    a = ap.parse_args()
    conv = corpus(a.seed)
    if a.check:
        problems = [p for c in conv for p in corpus_check(c)]
        for p in problems:
            print(p)
        return 1 if problems else 0
    json.dump(conv, __import__("sys").stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
