#!/usr/bin/env python3
"""Scores summaries against the probes of bench/summaries' conversations
(standard library only).  The rules, mechanical (RESULTS.md says them too):

  Matching.  An identifier or number (a recall probe's value, an artifact's
  target) is kept when the summary holds it verbatim, case and all, with no
  letter or digit right before or after it (ORD-1234 is not found in
  ORD-12345).  A key phrase (goals, next step, decisions, reasons, changes,
  questions) is found when the summary holds it, case aside, white space
  collapsed.  A line is one line of the summary (an extractive summary's
  item, or its Identifiers line).

  Sections.  A line "Goal and state:", "Decisions:", "Identifiers:",
  "Open items:", "Lookup hints:" or "Earlier:" (optionally after #, * or -,
  case aside) starts that section, up to the next heading; a summary of
  several segments has each section once per segment, taken together.

  recall        kept: the value is in the summary.
  artifact      named: the target is kept; with its change: one line holds
                the target and the change's phrase.
  decision      kept: the decision's phrase is in the summary; with its
                reason: one line holds the decision's and the reason's
                phrases.
  continuation  latest goal named: its phrase is in the Goal and state
                section (anywhere, for a summary without sections);
                superseded goal presented as current: the superseded goal's
                phrase is in that section and the latest goal's is not, or
                comes after it; goal right: named and not superseded; next
                step: its phrase is in the summary.  (Also reported: the
                latest goal's phrase anywhere in the summary.)
  question      an answered question listed as open: its phrase is in the
                Open items section (an error); an open question listed: its
                phrase is there (else a miss).

    python3 score.py corpus.json summaries.jsonl [--json scores.json]

summaries.jsonl: one JSON object a line, {"config", "conv", "summary",
"covered"} (covered: how many of the conversation's first messages the
summary covers).  Prints Markdown.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import corpus_check  # noqa: E402

HEADINGS = ["Goal and state", "Decisions", "Identifiers", "Open items", "Lookup hints", "Earlier"]
HEADING_RE = re.compile(r"^\s*[#*\-\s]*(%s)\s*:\**\s*(.*)$" % "|".join(HEADINGS), re.I)


def norm(s):
    return re.sub(r"\s+", " ", s).strip().lower()


def has_value(text, value):
    """value verbatim in text, not inside a longer identifier or number."""
    return re.search(r"(?<![A-Za-z0-9])%s(?![A-Za-z0-9])" % re.escape(value), text) is not None


def has_phrase(text, phrase):
    return norm(phrase) in norm(text)


def sections(summary):
    """section name -> its text (heading lines' rest included), and whether
    the summary has sections at all."""
    out = {h: [] for h in HEADINGS}
    cur = None
    found = False
    for line in summary.splitlines():
        m = HEADING_RE.match(line)
        if m:
            found = True
            cur = next(h for h in HEADINGS if h.lower() == m.group(1).lower())
            if m.group(2).strip():
                out[cur].append(m.group(2))
        elif cur is not None and line.strip():
            out[cur].append(line)
    return {h: "\n".join(v) for h, v in out.items()}, found


def score(conv, summary):
    """Per-probe outcomes of one summary, and its totals."""
    lines = summary.splitlines()
    secs, sectioned = sections(summary)
    goal_text = secs["Goal and state"] if sectioned else summary
    open_text = secs["Open items"]
    res = []
    for p in conv["probes"]:
        k = p["kind"]
        r = {"kind": k}
        if k == "recall":
            r.update(cls=p["class"], value=p["value"], kept=has_value(summary, p["value"]))
        elif k == "artifact":
            r.update(target=p["target"], change=p["change"], named=has_value(summary, p["target"]),
                     with_change=any(has_value(l, p["target"]) and has_phrase(l, p["change"]) for l in lines))
        elif k == "decision":
            r.update(decision=p["decision"], reason=p["reason"], kept=has_phrase(summary, p["decision"]),
                     with_reason=any(has_phrase(l, p["decision"]) and has_phrase(l, p["reason"]) for l in lines))
        elif k == "continuation":
            g, latest, old = norm(goal_text), norm(p["latest_goal"]), norm(p["superseded_goal"])
            named = latest in g
            superseded = old in g and (not named or g.index(old) < g.index(latest))
            r.update(latest_goal=p["latest_goal"], superseded_goal=p["superseded_goal"],
                     named=named, anywhere=has_phrase(summary, p["latest_goal"]), superseded_as_current=superseded, goal_right=named and not superseded,
                     next_step=p["next_step"], next_step_kept=has_phrase(summary, p["next_step"]))
        elif k == "question":
            listed = has_phrase(open_text, p["phrase"])
            r.update(phrase=p["phrase"], answered=p["answered"], listed_as_open=listed)
        res.append(r)
    return res, sectioned


def totals(results):
    t = {"ids": 0, "ids_kept": 0, "numbers": 0, "numbers_kept": 0,
         "artifacts": 0, "artifacts_named": 0, "artifacts_with_change": 0,
         "decisions": 0, "decisions_kept": 0, "decisions_with_reason": 0,
         "goal_named": 0, "goal_anywhere": 0, "superseded_as_current": 0, "goal_right": 0, "next_step_kept": 0, "convs": 0,
         "answered": 0, "answered_listed_open": 0, "open": 0, "open_listed": 0}
    for r in results:
        k = r["kind"]
        if k == "recall":
            c = "ids" if r["cls"] == "identifier" else "numbers"
            t[c] += 1
            t[c + "_kept"] += r["kept"]
        elif k == "artifact":
            t["artifacts"] += 1
            t["artifacts_named"] += r["named"]
            t["artifacts_with_change"] += r["with_change"]
        elif k == "decision":
            t["decisions"] += 1
            t["decisions_kept"] += r["kept"]
            t["decisions_with_reason"] += r["with_reason"]
        elif k == "continuation":
            t["convs"] += 1
            t["goal_named"] += r["named"]
            t["goal_anywhere"] += r["anywhere"]
            t["superseded_as_current"] += r["superseded_as_current"]
            t["goal_right"] += r["goal_right"]
            t["next_step_kept"] += r["next_step_kept"]
        elif k == "question":
            if r["answered"]:
                t["answered"] += 1
                t["answered_listed_open"] += r["listed_as_open"]
            else:
                t["open"] += 1
                t["open_listed"] += r["listed_as_open"]
    return t


def add(a, b):
    return {k: a.get(k, 0) + v for k, v in b.items()}


def pct(n, d):
    return "%.0f %%" % (100.0 * n / d) if d else "-"


def frac(n, d):
    return "%d/%d" % (n, d)


def meets(t):
    """The issue's targets for the extractive summarizer."""
    idn = t["ids_kept"] + t["numbers_kept"]
    return {"ids_numbers_90": 10 * idn >= 9 * (t["ids"] + t["numbers"]),
            "latest_goal_named": t["goal_named"] == t["convs"],
            "no_answered_open": t["answered_listed_open"] == 0}


def request_report(by_kind, tot):
    """What a request to the model carries (its system prompt and
    transcript, scored as a summary would be): the facts a model could keep.
    Sections, goals' order and open questions say nothing of a transcript."""
    out = ["What the request gives the model (system prompt and transcript), scored as a summary: "
           "an upper bound of what a model can keep, not what one keeps.\n",
           "| carried in the request | chats | agent sessions | all |", "|---|---:|---:|---:|"]
    kinds = [by_kind.get("chat", {}), by_kind.get("agent", {}), tot]
    for label, n, d in [("identifiers and numbers", lambda t: t["ids_kept"] + t["numbers_kept"], lambda t: t["ids"] + t["numbers"]),
                        ("latest goal's phrase", lambda t: t["goal_anywhere"], lambda t: t["convs"]),
                        ("next step's phrase", lambda t: t["next_step_kept"], lambda t: t["convs"]),
                        ("decisions with their reason on one line", lambda t: t["decisions_with_reason"], lambda t: t["decisions"]),
                        ("artifacts with their change on one line", lambda t: t["artifacts_with_change"], lambda t: t["artifacts"])]:
        out.append("| %s | %s |" % (label, " | ".join("%s (%s)" % (pct(n(t), d(t)), frac(n(t), d(t))) if t else "-" for t in kinds)))
    out.append("")
    return out


def report(corpus, rows):
    """Markdown: per configuration, totals by kind and a line per conversation."""
    convs = {c["id"]: c for c in corpus}
    out, data = [], {}
    configs = []
    for r in rows:
        if r["config"] not in configs:
            configs.append(r["config"])
    for cfg in configs:
        per, tot, by_kind = [], {}, {}
        unanswerable = []
        for r in (x for x in rows if x["config"] == cfg):
            conv = convs[r["conv"]]
            # a probe whose fact the summarized messages do not hold could not be answered
            if r.get("covered") is not None:
                unanswerable += [p for p in corpus_check(conv, r["covered"]) if "not in" in p]
            res, sectioned = score(conv, r["summary"] or "")
            t = totals(res)
            tot = add(tot, t)
            by_kind[conv["kind"]] = add(by_kind.get(conv["kind"], {}), t)
            per.append((conv, r, t, res, sectioned))
        data[cfg] = {"totals": tot, "by_kind": by_kind, "meets": meets(tot), "unanswerable": unanswerable,
                     "conversations": [{"conv": c["id"], "totals": t, "results": res, "sectioned": s,
                                        "summary_tokens": r.get("tokens")} for c, r, t, res, s in per]}
        m = meets(tot)
        out.append("## %s\n" % cfg)
        if cfg.endswith("-request"):
            out += request_report(by_kind, tot)
            continue
        out.append("| | chats | agent sessions | all | target |")
        out.append("|---|---:|---:|---:|---|")
        kinds = [by_kind.get("chat", {}), by_kind.get("agent", {}), tot]

        def row(label, f, target=""):
            out.append("| %s | %s | %s | %s | %s |" % ((label,) + tuple(f(t) if t else "-" for t in kinds) + (target,)))
        row("identifiers and numbers kept", lambda t: "%s (%s)" % (pct(t["ids_kept"] + t["numbers_kept"], t["ids"] + t["numbers"]),
                                                                    frac(t["ids_kept"] + t["numbers_kept"], t["ids"] + t["numbers"])),
            ">= 90 %%: %s" % ("met" if m["ids_numbers_90"] else "**not met**"))
        row("- identifiers", lambda t: "%s (%s)" % (pct(t["ids_kept"], t["ids"]), frac(t["ids_kept"], t["ids"])))
        row("- numbers", lambda t: "%s (%s)" % (pct(t["numbers_kept"], t["numbers"]), frac(t["numbers_kept"], t["numbers"])))
        row("latest goal named", lambda t: frac(t["goal_named"], t["convs"]),
            "all: %s" % ("met" if m["latest_goal_named"] else "**not met**"))
        row("- its phrase anywhere in the summary", lambda t: frac(t["goal_anywhere"], t["convs"]))
        row("superseded goal presented as current", lambda t: frac(t["superseded_as_current"], t["convs"]))
        row("goal right (latest named, superseded not current)", lambda t: frac(t["goal_right"], t["convs"]))
        row("next step kept", lambda t: frac(t["next_step_kept"], t["convs"]))
        row("answered questions listed as open", lambda t: frac(t["answered_listed_open"], t["answered"]),
            "none: %s" % ("met" if m["no_answered_open"] else "**not met**"))
        row("open questions listed", lambda t: frac(t["open_listed"], t["open"]))
        row("decisions kept", lambda t: frac(t["decisions_kept"], t["decisions"]))
        row("decisions kept with their reason", lambda t: frac(t["decisions_with_reason"], t["decisions"]))
        row("artifacts named", lambda t: frac(t["artifacts_named"], t["artifacts"]))
        row("artifacts named with their change", lambda t: frac(t["artifacts_with_change"], t["artifacts"]))
        out.append("")
        if unanswerable:
            out.append("Probes the summarized messages do not hold (unanswerable): " + "; ".join(unanswerable) + "\n")
        out.append("| conversation | messages | covered | summary tokens | ids+numbers | latest goal | superseded as current | next step | answered listed open | open listed | decisions (with reason) | artifacts (with change) |")
        out.append("|---|---:|---:|---:|---:|---|---|---|---:|---:|---:|---:|")
        for c, r, t, res, s in per:
            out.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s (%d) | %s (%d) |" % (
                c["id"], len(c["messages"]), r.get("covered", "-"), r.get("tokens", "-"),
                frac(t["ids_kept"] + t["numbers_kept"], t["ids"] + t["numbers"]),
                "yes" if t["goal_named"] else "no", "yes" if t["superseded_as_current"] else "no",
                "yes" if t["next_step_kept"] else "no",
                frac(t["answered_listed_open"], t["answered"]), frac(t["open_listed"], t["open"]),
                frac(t["decisions_kept"], t["decisions"]), t["decisions_with_reason"],
                frac(t["artifacts_named"], t["artifacts"]), t["artifacts_with_change"]))
        out.append("")
        missed = {}
        for c, r, t, res, s in per:
            for x in res:
                if x["kind"] == "recall" and not x["kept"]:
                    missed.setdefault(x["cls"] + ": " + next(p["what"] for p in c["probes"]
                                                             if p["kind"] == "recall" and p["value"] == x["value"]), []).append(x["value"])
        if missed:
            out.append("Identifiers and numbers lost, by what they are: " + "; ".join(
                "%s %d (%s)" % (k, len(v), ", ".join(v[:3]) + (", ..." if len(v) > 3 else "")) for k, v in sorted(missed.items())) + "\n")
    return "\n".join(out), data


def main():
    ap = argparse.ArgumentParser(description="score summaries against bench/summaries' probes")
    ap.add_argument("corpus")
    ap.add_argument("summaries")
    ap.add_argument("--json", help="write the scores, probe by probe, here")
    a = ap.parse_args()
    with open(a.corpus) as f:
        corpus = json.load(f)
    with open(a.summaries) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    text, data = report(corpus, rows)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
