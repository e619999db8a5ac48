"""LangGraph programs the tests run: a chat graph with ctxwin's
SummarizationNode in front of a chat model served by the mock LLM.

Run as a script, it is one process of a chat that restarts:
``python lg_program.py DSN BASE_URL KEY THREAD TURNS FIRST SAVER`` runs TURNS
turns on the thread with an in-memory checkpointer (SAVER ``memory``: lost
when the process ends) or LangGraph's PostgresSaver (``postgres``) and
prints the last window and the state's length as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, TypedDict

from langchain_core.messages import AnyMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from ctxwin.langgraph import SummarizationNode

MAX_TOKENS = 600
BEFORE = 300
SUMMARY_TOKENS = 200


class State(MessagesState):
    context: dict[str, Any]
    summarized_messages: list[AnyMessage]      # here to be read in the graph's output


class LLMInputState(TypedDict):
    summarized_messages: list[AnyMessage]
    context: dict[str, Any]


def chat_model(base_url: str, key: str, model: str = "mock") -> ChatOpenAI:
    return ChatOpenAI(model=model, base_url=base_url, api_key=key, max_retries=0)  # type: ignore[arg-type]


def user_text(i: int) -> str:
    return (f"Turn {i}: please remember that the parcel for customer number {i} leaves "
            f"the warehouse on a weekday morning.")


def build(node: SummarizationNode, model: ChatOpenAI, same_key: bool, checkpointer: Any = None) -> Any:
    """LangMem's example graph: summarize, then call the model."""
    if same_key:
        def call_model(state: State) -> dict[str, Any]:
            return {"messages": [model.invoke(state["messages"])]}

        async def acall_model(state: State) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}
    else:
        def call_model(state: LLMInputState) -> dict[str, Any]:  # type: ignore[misc]
            return {"messages": [model.invoke(state["summarized_messages"])]}

        async def acall_model(state: LLMInputState) -> dict[str, Any]:  # type: ignore[misc]
            return {"messages": [await model.ainvoke(state["summarized_messages"])]}
    g = StateGraph(State)
    g.add_node("summarize", node)
    g.add_node("call_model", call_model)
    g.add_edge(START, "summarize")
    g.add_edge("summarize", "call_model")
    return g.compile(checkpointer=checkpointer or InMemorySaver())


def main() -> None:
    import psycopg

    dsn, base_url, key, thread, turns, first, saver = sys.argv[1:8]
    with psycopg.connect(dsn, autocommit=True) as conn:
        node = SummarizationNode(max_tokens=MAX_TOKENS, max_tokens_before_summary=BEFORE,
                                 max_summary_tokens=SUMMARY_TOKENS, connection=conn)
        checkpointer: Any = None
        if saver == "postgres":
            from langgraph.checkpoint.postgres import PostgresSaver

            cp_conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
            checkpointer = PostgresSaver(cp_conn)       # type: ignore[arg-type]
            checkpointer.setup()
        graph = build(node, chat_model(base_url, key), same_key=False, checkpointer=checkpointer)
        cfg = {"configurable": {"thread_id": thread}}
        out: Any = None
        for i in range(int(first), int(first) + int(turns)):
            out = graph.invoke({"messages": [("user", user_text(i))]}, cfg)
        print(json.dumps({"summarized": [m.model_dump(include={"type", "content", "id"})
                                         for m in out["summarized_messages"]],
                          "state": len(out["messages"])}))


_: Callable[..., Any] = main

if __name__ == "__main__":
    main()
