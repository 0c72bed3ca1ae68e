"""An agent books a flight, and a human-in-the-loop policy approves each tool call.

The "model" has written one program that calls two of the service's tools:
``search_flights`` (read-only: approved automatically) and ``book_flight`` (spends money:
approved only under a price limit). ``AgentSandbox.start`` runs the program until its first
tool call and hands that call to us as a ``PausedToolCall``; we approve it (run the tool and
``resume(value=...)``) or reject it (``resume(error=...)``), and the program, which sees a
rejection as a thrown ``ToolError``, carries on.

Run it with ``.venv/bin/python examples/approval_agent.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pydeno

# The service's data: the flights its search tool knows about (prices in EUR).
FLIGHTS: list[dict[str, Any]] = [
    {"id": "TP1203", "from": "OSL", "to": "LIS", "stops": 0, "minutes": 235, "price": 640},
    {"id": "KL1148", "from": "OSL", "to": "LIS", "stops": 1, "minutes": 370, "price": 310},
    {"id": "LH863", "from": "OSL", "to": "LIS", "stops": 1, "minutes": 415, "price": 285},
]

# The approval policy: bookings above this need a human, so the agent's are refused.
PRICE_LIMIT = 400


def search_flights(origin: str, destination: str) -> list[dict[str, Any]]:
    """Flights from origin to destination, with their duration in minutes and price in EUR."""
    return [f for f in FLIGHTS if f["from"] == origin and f["to"] == destination]


def book_flight(flight_id: str, passenger: str) -> dict[str, Any]:
    """Book a seat on a flight; returns the booking."""
    flight = next(f for f in FLIGHTS if f["id"] == flight_id)
    return {"booking": f"BK-{flight_id}", "passenger": passenger, "price": flight["price"]}


TOOLS: dict[str, Callable[..., Any]] = {"search_flights": search_flights, "book_flight": book_flight}

# What the model wrote. It prefers the fastest flight, and falls back to the cheapest one
# if a booking is refused: a refusal reaches it as an Error it can catch.
PROGRAM = """
const flights = await tools.search_flights("OSL", "LIS");
const fastest = flights.reduce((a, b) => (b.minutes < a.minutes ? b : a));
const cheapest = flights.reduce((a, b) => (b.price < a.price ? b : a));
const refused = [];
let booked = null;
for (const flight of [fastest, cheapest]) {
  try {
    booked = await tools.book_flight(flight.id, "Ada Lovelace");
    break;
  } catch (e) {
    refused.push(`${flight.id}: ${e.name}: ${e.message}`);
  }
}
({ searched: flights.length, booked, refused })
"""


def review(name: str, args: list[Any]) -> str | None:
    """The approval step: None to approve the call, or the reason to reject it.

    It decides from the service's own data, never from what the program claims (the price
    is looked up by flight id, not read from the program's arguments).
    """
    if name == "search_flights":
        return None  # read-only: always fine
    if name == "book_flight":
        flight = next((f for f in FLIGHTS if f["id"] == args[0]), None)
        if flight is None:
            return f"no flight {args[0]}"
        if flight["price"] > PRICE_LIMIT:
            return f"{flight['price']} EUR is over the approval limit of {PRICE_LIMIT} EUR"
        return None
    return f"{name} is not allowed"


def main() -> None:
    # max_tool_calls: the program's whole budget of tool calls, rejected ones included.
    # max_pause: how long one run may wait for our answers, in seconds, before it is killed.
    with pydeno.AgentSandbox(TOOLS, max_tool_calls=5, max_pause=60, timeout=5.0) as agent:
        step = agent.start(PROGRAM)
        while isinstance(step, pydeno.PausedToolCall):
            call = f"tools.{step.name}({json.dumps(step.args)[1:-1]})"
            reason = review(step.name, step.args)
            if reason is None:
                print(f"approved: {call}")
                step = step.resume(value=TOOLS[step.name](*step.args))
            else:
                print(f"rejected: {call}: {reason}")
                step = step.resume(error=pydeno.ToolError(reason))
        print("result:", json.dumps(step))
        print("tool calls charged:", agent.tool_calls_made)


if __name__ == "__main__":
    main()
