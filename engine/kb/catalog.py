"""The fixed catalogue of knowledge-base record types: what ``kb_types`` lists and ``kb_write`` accepts.

A knowledge base beside a docs and code corpus records what the corpus implies but does not
state: which concepts and components exist, what depends on what, which decisions were taken
and which questions are open, each backed by evidence. Every node type is identified by one
string property (writing the same ``name`` of a ``component`` twice finds the first node);
every relation type names the node types it may join. Other properties are free JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EVIDENCE_TYPE", "NODE_TYPES", "RELATION_TYPES", "NodeType", "RelationType", "node_type", "relation_type"]


@dataclass(frozen=True, slots=True)
class NodeType:
    name: str
    description: str
    #: The string property that identifies a node of this type (required, immutable).
    identity: str


@dataclass(frozen=True, slots=True)
class RelationType:
    name: str
    description: str
    source_types: tuple[str, ...]
    target_types: tuple[str, ...]


NODE_TYPES: tuple[NodeType, ...] = (
    NodeType("concept", "An idea or term the corpus explains (e.g. 'reciprocal rank fusion').", "name"),
    NodeType("component", "A module, package, service or subsystem (e.g. 'engine.retrieval').", "name"),
    NodeType("api", "A function, class, endpoint, option or command (e.g. 'quarry ingest --since').", "name"),
    NodeType("decision", "A design decision and its rationale.", "title"),
    NodeType("question", "An open question.", "title"),
    NodeType("note", "A finding or remark that fits no other type.", "title"),
)

_ANY = tuple(node.name for node in NODE_TYPES)

RELATION_TYPES: tuple[RelationType, ...] = (
    RelationType("relates_to", "A general association.", _ANY, _ANY),
    RelationType("part_of", "The source is a part of the target.", ("component", "api", "concept"),
                 ("component", "concept")),
    RelationType("depends_on", "The source needs the target to work.", ("component", "api"), ("component", "api")),
    RelationType("defines", "The source defines or implements the target.", ("component", "api"),
                 ("api", "concept")),
    RelationType("supersedes", "The source replaces the target.", ("decision", "api", "note", "component"),
                 ("decision", "api", "note", "component")),
    RelationType("answers", "The source answers the target question.", ("note", "decision"), ("question",)),
    RelationType("about", "The source is about the target.", ("decision", "question", "note"), _ANY),
)

#: Evidence is listed beside the graph types: exact bytes, identified by their SHA-256.
EVIDENCE_TYPE = "evidence"

_NODES = {node.name: node for node in NODE_TYPES}
_RELATIONS = {relation.name: relation for relation in RELATION_TYPES}


def node_type(name: str) -> NodeType | None:
    return _NODES.get(name)


def relation_type(name: str) -> RelationType | None:
    return _RELATIONS.get(name)
