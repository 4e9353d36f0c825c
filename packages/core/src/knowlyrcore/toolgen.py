"""A procedurally generated tool library and (query, tool) pairs to train and test retrieval.

Tools come in families: a service (``crm``, ``flights``, ``payments`` ...) offers actions
(get, list, create, update, delete, search, cancel, export, archive, count) on its entities, each
with a realistic name (``crm_update_contact``), a description and a JSON schema whose
parameters are the entity's fields. Vendor variants (``acme_crm_update_contact``) scale the
library to tens of thousands of tools with near-duplicates, which is what makes retrieval hard.

``query_pairs(library, split, seed)`` phrases a request for a tool from templates. The ``train``
split uses some phrasings and services; ``test`` uses phrasings never seen in training (on the
same services); ``test-unseen`` uses services whose tools never appear in training pairs. So a
retriever that memorises training phrasings or tools gets no credit on the held-out splits.

Examples:
    >>> library = generate_library()
    >>> len(library) >= 1000, "crm_update_contact" in library
    (True, True)
    >>> query, tool = query_pairs(library, "train", n=1, seed=0)[0]
    >>> tool in library
    True
"""

from __future__ import annotations

import random
from typing import Any

from knowlyrcore.domain import ToolSpec
from knowlyrcore.tool_library import ToolLibrary

SPLITS = ("train", "test", "test-unseen")

# service -> {entity: {field: description}}
SERVICES: dict[str, dict[str, dict[str, str]]] = {
    "crm": {
        "contact": {"email": "email address", "phone": "phone number", "company": "employer"},
        "deal": {"amount": "value in USD", "stage": "pipeline stage", "owner": "sales owner"},
        "lead": {"source": "where the lead came from", "score": "lead score"},
    },
    "flights": {
        "reservation": {"passenger": "passenger name", "flight_number": "flight number", "date": "travel date"},
        "flight": {"origin": "departure airport code", "destination": "arrival airport code", "date": "date"},
        "seat": {"row": "seat row", "cabin": "cabin class"},
    },
    "hotels": {
        "booking": {"guest": "guest name", "check_in": "arrival date", "nights": "number of nights"},
        "room": {"hotel": "hotel id", "type": "room type"},
        "review": {"rating": "stars", "text": "review"},
    },
    "payments": {
        "invoice": {"customer": "customer id", "amount": "amount due", "due_date": "due date"},
        "refund": {"charge": "charge id", "amount": "amount to refund"},
        "subscription": {"plan": "plan name", "customer": "customer id"},
    },
    "shop": {
        "order": {"customer": "customer id", "status": "order status"},
        "product": {"sku": "stock unit", "price": "unit price"},
        "cart": {"user": "shopper id", "coupon": "discount code"},
    },
    "calendar": {
        "event": {"title": "event title", "start": "start time", "attendees": "invitees"},
        "reminder": {"time": "when to remind", "note": "what to say"},
    },
    "email": {
        "message": {"to": "recipient", "subject": "subject line", "body": "message text"},
        "draft": {"to": "recipient", "subject": "subject"},
        "folder": {"name": "folder name"},
    },
    "github": {
        "issue": {"repo": "owner/name", "title": "issue title", "label": "label"},
        "pull_request": {"repo": "owner/name", "branch": "head branch"},
        "release": {"tag": "version tag"},
    },
    "jira": {
        "ticket": {"project": "project key", "summary": "summary", "assignee": "assignee"},
        "sprint": {"board": "board id", "goal": "sprint goal"},
    },
    "slack": {"channel": {"name": "channel name", "topic": "topic"}, "message": {"channel": "channel", "text": "text"}},
    "hr": {
        "employee": {"department": "department", "title": "job title"},
        "leave_request": {"employee": "employee id", "days": "number of days"},
        "payslip": {"employee": "employee id", "month": "month"},
    },
    "accounting": {
        "ledger_entry": {"account": "account code", "amount": "amount"},
        "budget": {"team": "team", "year": "fiscal year"},
        "expense": {"employee": "employee id", "category": "expense category"},
    },
    "inventory": {
        "stock_item": {"warehouse": "warehouse id", "quantity": "units"},
        "supplier": {"country": "country"},
        "purchase_order": {"supplier": "supplier id", "total": "order total"},
    },
    "shipping": {
        "shipment": {"carrier": "carrier", "tracking_number": "tracking number"},
        "label": {"weight": "parcel weight", "destination": "address"},
        "pickup": {"date": "pickup date"},
    },
    "iot": {
        "device": {"room": "room", "model": "device model"},
        "thermostat": {"temperature": "target temperature"},
        "sensor_reading": {"sensor": "sensor id", "since": "start time"},
    },
    "music": {"playlist": {"name": "playlist name", "genre": "genre"}, "track": {"artist": "artist", "album": "album"}},
    "maps": {
        "route": {"origin": "start address", "destination": "end address", "mode": "travel mode"},
        "place": {"query": "what to look for", "near": "location"},
    },
    "banking": {
        "account": {"holder": "account holder", "currency": "currency"},
        "transfer": {"from_account": "source account", "to_account": "target account", "amount": "amount"},
        "card": {"account": "account id", "limit": "spending limit"},
    },
    "insurance": {
        "policy": {"holder": "policy holder", "coverage": "coverage type"},
        "claim": {"policy": "policy id", "incident_date": "date of the incident"},
    },
    "healthcare": {
        "appointment": {"patient": "patient id", "doctor": "doctor", "time": "appointment time"},
        "prescription": {"patient": "patient id", "drug": "medication"},
    },
    "education": {
        "course": {"title": "course title", "term": "term"},
        "enrollment": {"student": "student id", "course": "course id"},
        "grade": {"student": "student id", "course": "course id"},
    },
    "realestate": {
        "listing": {"city": "city", "price": "asking price", "bedrooms": "bedrooms"},
        "viewing": {"listing": "listing id", "time": "viewing time"},
    },
    "weather": {
        "forecast": {"city": "city", "days": "days ahead"},
        "alert": {"region": "region", "severity": "minimum severity"},
    },
    "news": {"article": {"topic": "topic", "source": "publisher"}, "feed": {"url": "feed address"}},
}

# action -> (description template, parameters: "id" | "fields" | "query" | "none", verbs for queries)
ACTIONS: dict[str, tuple[str, str]] = {
    "get": ("Get one {entity} of the {service} service by its id.", "id"),
    "list": ("List the {entities} of the {service} service, newest first.", "none"),
    "create": ("Create a new {entity} in the {service} service.", "fields"),
    "update": ("Update the fields of an existing {entity} in the {service} service.", "id+fields"),
    "delete": ("Delete {a_entity} from the {service} service permanently.", "id"),
    "search": ("Search {entities} of the {service} service matching a free-text query.", "query"),
    "cancel": ("Cancel {a_entity} in the {service} service; it can no longer be used.", "id"),
    "export": ("Export {entities} of the {service} service as a CSV file.", "none"),
    "archive": ("Archive {a_entity} of the {service} service (hidden, not deleted).", "id"),
    "count": ("Count the {entities} of the {service} service.", "none"),
}

# the ways a user asks for each action: the first ones are for training, the rest held out
PHRASINGS: dict[str, list[str]] = {
    "get": [
        "show me the {entity} {ref}",
        "I need the details of {entity} {ref}",
        "pull up {entity} {ref} in {service}",
        "what does {entity} {ref} look like?",
    ],
    "list": [
        "list all my {entities}",
        "show every {entity} we have in {service}",
        "give me an overview of the {entities}",
        "which {entities} exist right now?",
    ],
    "create": [
        "create a new {entity}",
        "add a {entity} to {service}",
        "set up another {entity} for me",
        "I'd like to register a fresh {entity}",
    ],
    "update": [
        "update {entity} {ref}",
        "change the details of {entity} {ref}",
        "edit {entity} {ref} in {service}",
        "modify what we have on {entity} {ref}",
    ],
    "delete": [
        "delete {entity} {ref}",
        "remove {entity} {ref} from {service}",
        "get rid of {entity} {ref} for good",
        "erase {entity} {ref} entirely",
    ],
    "search": [
        "search {entities} for {text}",
        "find {entities} about {text}",
        "look for any {entity} mentioning {text}",
        "are there {entities} related to {text}?",
    ],
    "cancel": [
        "cancel {entity} {ref}",
        "I want to call off {entity} {ref}",
        "please void {entity} {ref}",
        "stop {entity} {ref}, I no longer need it",
    ],
    "export": [
        "export the {entities} to CSV",
        "download all {entities} as a spreadsheet",
        "I need a file with every {entity}",
        "dump the {entities} so I can open them in Excel",
    ],
    "archive": [
        "archive {entity} {ref}",
        "move {entity} {ref} to the archive",
        "hide {entity} {ref} but keep it",
        "shelve {entity} {ref} for now",
    ],
    "count": [
        "how many {entities} are there?",
        "count the {entities} in {service}",
        "give me the number of {entities}",
        "what's the total of {entities} we have?",
    ],
}
TRAIN_PHRASINGS = 2  # the first two phrasings of each action are training; the others are held out

VENDORS = (
    "acme",
    "globex",
    "initech",
    "umbrella",
    "hooli",
    "stark",
    "wayne",
    "wonka",
    "tyrell",
    "cyberdyne",
    "soylent",
    "vandelay",
    "aperture",
    "oscorp",
    "massive",
    "piedpiper",
)
TEXTS = ("late delivery", "quarterly review", "the Berlin office", "priority customers", "last week", "errors")


def _plural(entity: str) -> str:
    words = entity.replace("_", " ")
    return words + ("es" if words.endswith(("s", "x", "ch", "sh")) else "s")


def unseen_services(seed: int = 0) -> set[str]:
    """The services held out of training pairs (a quarter of them, fixed by ``seed``)."""
    names = sorted(SERVICES)
    return set(random.Random(seed).sample(names, len(names) // 4))


def _tool(prefix: str, service: str, entity: str, action: str) -> ToolSpec:
    template, kind = ACTIONS[action]
    words = entity.replace("_", " ")
    article = "an" if words[0] in "aeiou" else "a"
    description = template.format(
        entity=words, a_entity=f"{article} {words}", entities=_plural(entity), service=service
    )
    if prefix:
        description += f" ({prefix.capitalize()} edition of the API.)"
    properties: dict[str, Any] = {}
    required: list[str] = []
    if "id" in kind:
        properties[f"{entity}_id"] = {"type": "string", "description": f"The id of the {words}."}
        required.append(f"{entity}_id")
    if "fields" in kind:
        for field, what in SERVICES[service][entity].items():
            properties[field] = {"type": "string", "description": f"The {words}'s {what}."}
    if kind == "query":
        properties["query"] = {"type": "string", "description": "Free text to match."}
        properties["limit"] = {"type": "integer", "description": "At most this many results.", "minimum": 1}
        required.append("query")
    name = "_".join(p for p in (prefix, service, action, entity) if p)
    return ToolSpec(
        name=name,
        description=description,
        parameters={"type": "object", "properties": properties, "required": required},
    )


def generate_library(n_vendors: int = 1) -> ToolLibrary:
    """Every (service, entity, action) tool (620), plus ``n_vendors`` vendor variants of each
    (the default 1 gives 1,240 tools; ``generate_library(16)`` gives 10,540)."""
    if not 0 <= n_vendors <= len(VENDORS):
        raise ValueError(f"n_vendors must be in [0, {len(VENDORS)}], got {n_vendors}")
    tools = []
    for prefix in ("", *VENDORS[:n_vendors]):
        for service, entities in SERVICES.items():
            for entity in entities:
                tools += [_tool(prefix, service, entity, action) for action in ACTIONS]
    return ToolLibrary(tools)


def query_pairs(library: ToolLibrary, split: str, *, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (query, tool name) pairs of ``split`` for the generated tools in ``library``; a vendor
    variant's query names the vendor."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    held_out = unseen_services()
    rng = random.Random(f"{split}:{seed}")
    candidates = []
    for service, entities in SERVICES.items():
        if (service in held_out) != (split == "test-unseen"):
            continue
        for entity in entities:
            for action in ACTIONS:
                for prefix in ("", *VENDORS):
                    if "_".join(p for p in (prefix, service, action, entity) if p) in library:
                        candidates.append((prefix, service, entity, action))
    if not candidates:
        raise ValueError(f"the library has none of the {split} split's tools")
    phrasings = slice(0, TRAIN_PHRASINGS) if split == "train" else slice(TRAIN_PHRASINGS, None)
    pairs = []
    for _ in range(n):
        prefix, service, entity, action = rng.choice(candidates)
        template = rng.choice(PHRASINGS[action][phrasings])
        query = template.format(
            entity=entity.replace("_", " "),
            entities=_plural(entity),
            service=service,
            ref=f"#{rng.randrange(10_000, 99_999)}",
            text=rng.choice(TEXTS),
        )
        if prefix:  # a vendor's tool is asked for by the vendor's name
            query += f" ({prefix.capitalize()} {service})"
        pairs.append((query, "_".join(p for p in (prefix, service, action, entity) if p)))
    return pairs
