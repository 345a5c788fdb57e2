"""Version constraints from documents and manifests, checked against npm's own ``semver``.

The oracle is one long-lived node process running ``semver`` (``tests/semver_oracle``
when present, else a copy npm installs into the user cache once). Without node the
oracle tests fail rather than skip: version matching is not optional.

PEP 440 round trips compare ``packaging``'s ``SpecifierSet.contains`` with
``semver.satisfies`` on plain ``X.Y.Z`` releases only: prereleases have no exact
counterpart between the two schemes (see ``engine.ingest.manifests``). npm range
normalisation is compared on releases and prereleases alike.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet

from engine.ingest.compact_pragmas import compact_pragma_range
from engine.ingest.ecosystem_ranges import pep440_range
from engine.ingest.manifests import constraints_in_manifest
from engine.ingest.npm_ranges import normalise_npm_range
from engine.ingest.version_sets import UnrepresentableRange, format_range
from engine.ingest.versions import VersionConstraint, constraints_in_document
from tests.node_semver import SemverOracle


@pytest.fixture()
def semver(semver_oracle: SemverOracle) -> SemverOracle:
    return semver_oracle


def assert_canonical(semver: SemverOracle, ranges: list[str]) -> None:
    """Every range is valid node-semver and already in node's own normal form."""
    for emitted, normal in zip(ranges, semver.valid_ranges(ranges), strict=True):
        assert normal is not None, f"{emitted!r} is not a valid range"
        assert normal == emitted.replace(" || ", "||"), emitted


# ---------------------------------------------------------------- Compact pragmas

PRAGMAS = [
    ("pragma language_version >= 0.16;", ">=0.16.0"),
    ("pragma language_version >= 0.16 && <= 0.18;", ">=0.16.0 <0.19.0-0"),
    ("pragma language_version 0.16.0;", "0.16.0"),
    ("pragma language_version 0.16;", ">=0.16.0 <0.17.0-0"),
    ("pragma language_version >=0.16.0 <0.19;", ">=0.16.0 <0.19.0-0"),
    ("pragma language_version ^0.17;", ">=0.17.0 <0.18.0-0"),
    ("pragma language_version ~0.17.1;", ">=0.17.1 <0.18.0-0"),
    ("pragma language_version > 0.16 || == 0.14.2;", "0.14.2 || >=0.17.0"),
    ("pragma language_version\n    >= 0.16\n    && < 0.18.0;", ">=0.16.0 <0.18.0"),
    ("pragma language_version (0.16 || 0.18) && !0.18.1;",
     ">=0.16.0 <0.17.0-0 || >=0.18.0 <0.18.1 || >0.18.1 <0.19.0-0"),
    ("pragma language_version !(>= 1.0);", "<1.0.0"),
    ("pragma language_version 0.16.x;", ">=0.16.0 <0.17.0-0"),
]


@pytest.mark.parametrize(("source", "expected"), PRAGMAS)
def test_compact_pragmas(source: str, expected: str) -> None:
    [constraint] = constraints_in_document("contract.compact", source)
    assert constraint == VersionConstraint("language_target", "compact", expected, " ".join(source.split()), "pragma")


@pytest.mark.parametrize("source", [
    "pragma language_version;", "pragma language_version >= ;", "pragma language_version >= 0.16 &&;",
    "pragma language_version latest;", "pragma language_version (0.16;", "pragma language_version >* ;",
    "pragma language_version 0.16 - 0.18;", "pragma language_version >= 99999999999999999999;",
])
def test_unreadable_pragmas_are_skipped_with_a_reason(source: str) -> None:
    skipped: list[tuple[str, str]] = []
    assert constraints_in_document("contract.compact", source, skipped=skipped) == []
    assert len(skipped) == 1 and skipped[0][1]


def test_pragmas_in_comments_do_not_count() -> None:
    source = "// pragma language_version 0.1;\n/* pragma language_version 0.2; */\npragma language_version 0.3;\n"
    assert [c.range for c in constraints_in_document("a.compact", source)] == [">=0.3.0 <0.4.0-0"]


def test_markdown_pragmas_come_from_code_blocks_only() -> None:
    doc = (
        "# Counter\n\nOlder releases used `pragma language_version 0.14;` in prose.\n\n"
        "```compact\npragma language_version >= 0.16 && <= 0.18;\nimport CompactStandardLibrary;\n```\n\n"
        "~~~\npragma language_version >= 0.16 && <= 0.18;\n~~~\n"
    )
    assert [c.range for c in constraints_in_document("docs/counter.md", doc)] == [">=0.16.0 <0.19.0-0"]


def test_html_pragmas_are_read_through_markup() -> None:
    page = '<pre><span class="k">pragma</span> language_version &gt;= 0.16 &amp;&amp; &lt; 0.19;</pre>'
    assert [c.range for c in constraints_in_document("guide.html", page)] == [">=0.16.0 <0.19.0-0"]


# ---------------------------------------------------------------- front matter

_Row = tuple[str, str | None, str, str, str]  # facet, name, range, raw, origin
FRONT_MATTER: list[tuple[str, list[_Row]]] = [
    ("---\ntitle: Intro\nversion: 0.17\n---\n# Intro\n",
     [("language_target", None, ">=0.17.0 <0.18.0-0", "0.17", "front_matter:version")]),
    ('---\nversion: "0.17.x"\n---\n', [("language_target", None, ">=0.17.0 <0.18.0-0", "0.17.x",
                                       "front_matter:version")]),
    ("---\nlanguage_version: '>=0.16'  # minimum\n---\n",
     [("language_target", None, ">=0.16.0", ">=0.16", "front_matter:language_version")]),
    ("---\nversions: [0.16, 0.18]\n---\n",
     [("language_target", None, ">=0.16.0 <0.17.0-0 || >=0.18.0 <0.19.0-0", "[0.16, 0.18]",
       "front_matter:versions")]),
    ("---\nversions:\n  - 0.16\n  - '>=0.18.2'\ntags:\n  - x\n---\n",
     [("language_target", None, ">=0.16.0 <0.17.0-0 || >=0.18.2", "[0.16, >=0.18.2]", "front_matter:versions")]),
    ("---\ncompact-version: '>=0.16, <0.19'\nsdk_version: ^1.2\n---\n",
     [("language_target", "compact", ">=0.16.0 <0.19.0-0", ">=0.16, <0.19", "front_matter:compact-version"),
      ("sdk_dependency", None, ">=1.2.0 <2.0.0-0", "^1.2", "front_matter:sdk_version")]),
    ('+++\ntitle = "Intro"\ncompact_version = ">=0.16"\nversions = ["1.x", "2.1"]\n+++\n',
     [("language_target", "compact", ">=0.16.0", ">=0.16", "front_matter:compact_version"),
      ("language_target", None, ">=1.0.0 <2.0.0-0 || >=2.1.0 <2.2.0-0", "[1.x, 2.1]", "front_matter:versions")]),
]


@pytest.mark.parametrize(("doc", "expected"), FRONT_MATTER)
def test_front_matter(doc: str, expected: list[_Row]) -> None:
    found = constraints_in_document("docs/page.mdx", doc)
    assert [(c.facet, c.name, c.range, c.raw, c.origin) for c in found] == expected


@pytest.mark.parametrize("doc", [
    "---\nversion: latest\n---\n", "---\nversion: 2\n", "+++\nversion = [1, {a = 1}]\n+++\n",
    "+++\nversion = \n+++\n", "---\nversion:\n---\n", "\n---\nversion: 1\n---\n", "---\ntitle: x\n---\n",
])
def test_front_matter_without_usable_versions(doc: str) -> None:
    assert constraints_in_document("page.md", doc) == []


# ---------------------------------------------------------------- manifests

PACKAGE_JSON = json.dumps({
    "name": "app",
    "dependencies": {"@midnight-ntwrk/compact-runtime": "^0.8.1", "left": "1.2.3 - 2", "any": "*",
                     "ws": "workspace:*", "local": "file:../x", "gh": "user/repo#v1", "git": "git+ssh://h/r.git",
                     "tag": "latest", "alias": "npm:@scope/real@~2.1", "spaced": ">= 1.2.3 < 2"},
    "peerDependencies": {"react": "^17.0.0 || ^18.0.0"},
    "devDependencies": {"typescript": "~5.4"},
    "optionalDependencies": {"fsevents": "2.x"},
    "engines": {"node": ">=18"},
})


def _triples(found: list[VersionConstraint] | None) -> list[tuple[str, str | None, str]]:
    assert found is not None
    assert all(c.facet == "sdk_dependency" for c in found)
    return [(c.origin.split(":", 1)[1], c.name, c.range) for c in found]


def test_package_json() -> None:
    skipped: list[tuple[str, str]] = []
    assert _triples(constraints_in_manifest("web/package.json", PACKAGE_JSON, skipped=skipped)) == [
        ("dependencies", "@midnight-ntwrk/compact-runtime", ">=0.8.1 <0.9.0-0"),
        ("dependencies", "left", ">=1.2.3 <3.0.0-0"),
        ("dependencies", "any", "*"),
        ("dependencies", "alias", ">=2.1.0 <2.2.0-0"),
        ("dependencies", "spaced", ">=1.2.3 <2.0.0-0"),
        ("peerDependencies", "react", ">=17.0.0 <18.0.0-0 || >=18.0.0 <19.0.0-0"),  # 18.0.0-rc stays out
        ("devDependencies", "typescript", ">=5.4.0 <5.5.0-0"),
        ("optionalDependencies", "fsevents", ">=2.0.0 <3.0.0-0"),
        ("engines", "node", ">=18.0.0"),
    ]
    assert sorted(what.split()[1] for what, _ in skipped) == ["gh", "git", "local", "tag", "ws"]


PYPROJECT = """
[project]
name = "demo"
requires-python = ">=3.10"
dependencies = [
  "Requests[socks] >=2.28,<3 ; python_version < '3.13'",
  "zope.interface~=6.1",
  "typing_extensions",
  "pkg @ https://example.com/pkg.whl",
  "broken >>= 1",
]
[project.optional-dependencies]
docs = ["Sphinx==7.2.*", "furo!=2024.1.29"]
[dependency-groups]
test = ["pytest>=8", {include-group = "docs"}]
[tool.poetry.dependencies]
python = "^3.10"
numpy = "^1.26"
scipy = { version = "~1.11", optional = true }
pandas = [{ version = "<2", python = "<3.9" }, { version = ">=2.1", python = ">=3.9" }]
mylib = { path = "../mylib" }
exact = "2.0.1"
[tool.poetry.group.dev.dependencies]
black = ">=24.1, <25 || 26.*"
"""


def test_pyproject() -> None:
    skipped: list[tuple[str, str]] = []
    assert _triples(constraints_in_manifest("pyproject.toml", PYPROJECT, skipped=skipped)) == [
        ("project.requires-python", "python", ">=3.10.0"),
        ("project.dependencies", "requests", ">=2.28.0 <3.0.0"),
        ("project.dependencies", "zope-interface", ">=6.1.0 <7.0.0"),
        ("project.dependencies", "typing-extensions", "*"),
        ("project.optional-dependencies", "sphinx", ">=7.2.0 <7.3.0"),
        ("project.optional-dependencies", "furo", "<2024.1.29 || >2024.1.29"),
        ("dependency-groups", "pytest", ">=8.0.0"),
        ("tool.poetry.dependencies", "python", ">=3.10.0 <4.0.0-0"),
        ("tool.poetry.dependencies", "numpy", ">=1.26.0 <2.0.0-0"),
        ("tool.poetry.dependencies", "scipy", ">=1.11.0 <1.12.0-0"),
        ("tool.poetry.dependencies", "pandas", "<2.0.0 || >=2.1.0"),
        ("tool.poetry.dependencies", "exact", "2.0.1"),
        ("tool.poetry.group.dependencies", "black", ">=24.1.0 <25.0.0 || >=26.0.0 <27.0.0"),
    ]
    reasons = dict(skipped)
    assert any("pkg" in what for what in reasons) and any("mylib" in what for what in reasons)
    assert any("broken" in what for what in reasons)


def test_pep440_names_and_raw_text() -> None:
    found = constraints_in_manifest("requirements.txt", "Foo.Bar__baz >= 1.0 ; sys_platform == 'linux'\n")
    assert found == [VersionConstraint("sdk_dependency", "foo-bar-baz", ">=1.0.0",
                                       "Foo.Bar__baz >= 1.0 ; sys_platform == 'linux'", "requirements.txt")]


REQUIREMENTS = """\
# pinned
-r base.txt
-c constraints.txt
--index-url https://pypi.example/simple
-e git+https://github.com/o/r.git#egg=r
./local/pkg
https://example.com/x.whl
django>=4.2,<5.0  # LTS
numpy==1.26.4 \\
    --hash=sha256:abc
attrs
pywin32 >= 306 ; platform_system == "Windows"
weird ===2.0.0
"""


def test_requirements_txt() -> None:
    found = constraints_in_manifest("requirements-dev.txt", REQUIREMENTS)
    assert found is not None
    assert [(c.name, c.range, c.origin) for c in found] == [
        ("django", ">=4.2.0 <5.0.0", "requirements.txt"),
        ("numpy", "1.26.4", "requirements.txt"),
        ("attrs", "*", "requirements.txt"),
        ("pywin32", ">=306.0.0", "requirements.txt"),
        ("weird", "2.0.0", "requirements.txt"),
    ]


CARGO = """
[package]
name = "demo"
rust-version = "1.74"
[dependencies]
serde = "1.0"
tokio = { version = "1.35", features = ["full"] }
rand = "=0.8.5"
regex = ">= 1.5, < 1.11"
any = "*"
wild = "0.3.*"
zero = "0.0.3"
tilde = "~1.2.3"
local = { path = "../local" }
both = { path = "../both", version = "2" }
from_git = { git = "https://github.com/o/r" }
renamed = { package = "real-name", version = "0.4" }
inherited = { workspace = true }
bad = "not a version"
[dev-dependencies]
criterion = "0.5"
[build-dependencies]
cc = "1"
[target.'cfg(windows)'.dependencies]
winapi = "0.3.9"
[workspace.dependencies]
anyhow = "1.0.75"
"""


def test_cargo_toml() -> None:
    skipped: list[tuple[str, str]] = []
    assert _triples(constraints_in_manifest("crates/demo/Cargo.toml", CARGO, skipped=skipped)) == [
        ("package.rust-version", "rust", ">=1.74.0"),
        ("dependencies", "serde", ">=1.0.0 <2.0.0-0"),
        ("dependencies", "tokio", ">=1.35.0 <2.0.0-0"),
        ("dependencies", "rand", "0.8.5"),
        ("dependencies", "regex", ">=1.5.0 <1.11.0-0"),
        ("dependencies", "any", "*"),
        ("dependencies", "wild", ">=0.3.0 <0.4.0-0"),
        ("dependencies", "zero", ">=0.0.3 <0.0.4-0"),
        ("dependencies", "tilde", ">=1.2.3 <1.3.0-0"),
        ("dependencies", "both", ">=2.0.0 <3.0.0-0"),
        ("dependencies", "real-name", ">=0.4.0 <0.5.0-0"),
        ("dev-dependencies", "criterion", ">=0.5.0 <0.6.0-0"),
        ("build-dependencies", "cc", ">=1.0.0 <2.0.0-0"),
        ("workspace.dependencies", "anyhow", ">=1.0.75 <2.0.0-0"),
        ("target.dependencies", "winapi", ">=0.3.9 <0.4.0-0"),
    ]
    assert sorted(what.split()[1] for what, _ in skipped) == ["bad", "from_git", "inherited", "local"]


GO_MOD = """\
module example.com/app

go 1.21

toolchain go1.22.1

require github.com/pkg/errors v0.9.1

require (
\tgolang.org/x/text v0.14.0 // indirect
\tgithub.com/old/thing v2.0.0+incompatible
\texample.com/pseudo v0.0.0-20230101120000-abcdef123456
\t"example.com/quoted" v1.2.3
\texample.com/bad latest
)

replace github.com/pkg/errors => ../errors

exclude (
\texample.com/excluded v1.0.0
)
"""


def test_go_mod() -> None:
    skipped: list[tuple[str, str]] = []
    assert _triples(constraints_in_manifest("go.mod", GO_MOD, skipped=skipped)) == [
        ("go", "go", ">=1.21.0"),
        ("require", "github.com/pkg/errors", ">=0.9.1"),
        ("require", "golang.org/x/text", ">=0.14.0"),
        ("require", "github.com/old/thing", ">=2.0.0"),
        ("require", "example.com/pseudo", ">=0.0.0-20230101120000-abcdef123456"),
        ("require", "example.com/quoted", ">=1.2.3"),
    ]
    assert [what.split()[1] for what, _ in skipped] == ["example.com/bad"]
    assert _triples(constraints_in_manifest("go.mod", "go 1.22rc1\n")) == [("go", "go", ">=1.22.0-rc.1")]


@pytest.mark.parametrize(("path", "text"), [
    ("package.json", "{not json"), ("package.json", "[1, 2]"), ("package.json", '{"dependencies": [1]}'),
    ("package.json", '{"dependencies": {"a": 1, "b": null}}'), ("package.json", "[" * 100_000),
    ("pyproject.toml", "[project\n"), ("pyproject.toml", "project = 1\n[tool]\npoetry = 2"),
    ("pyproject.toml", '[project]\ndependencies = "requests"\noptional-dependencies = []'),
    ("Cargo.toml", "[dependencies\nserde = 1"), ("Cargo.toml", "dependencies = 3\ntarget = [1]"),
    ("go.mod", "\x00\x01 garbage ((( \n require\n)"), ("requirements.txt", "\x00\n=== ===\n[]\n"),
])
def test_garbage_manifests_never_raise(path: str, text: str) -> None:
    assert constraints_in_manifest(path, text, skipped=[]) is not None


@pytest.mark.parametrize(("path", "is_manifest"), [
    ("package.json", True), ("a/b/pyproject.toml", True), ("requirements.txt", True),
    ("requirements-dev.txt", True), ("requirements/base.in", True), ("requirements/notes.md", False),
    ("Cargo.toml", True), ("svc/go.mod", True), ("go.sum", False), ("package-lock.json", False),
    ("docs/package.json.md", False), ("README.md", False),
])
def test_manifest_detection(path: str, is_manifest: bool) -> None:
    assert (constraints_in_manifest(path, "") is not None) == is_manifest


@given(st.text(max_size=300))
@settings(max_examples=150, deadline=None)
def test_documents_never_raise(text: str) -> None:
    for path in ("a.compact", "a.md", "a.html", "a.txt"):
        constraints_in_document(path, "---\nversion: " + text)
        constraints_in_document(path, "pragma language_version " + text + ";")


# ---------------------------------------------------------------- manifest scope

def _dependency(name: str, origin: str) -> VersionConstraint:
    return VersionConstraint("sdk_dependency", name, "*", "*", origin)


# ---------------------------------------------------------------- node-semver oracle

def test_every_emitted_range_is_canonical_node_semver(semver: SemverOracle) -> None:
    emitted = [expected for _, expected in PRAGMAS]
    emitted += [r for _, rows in FRONT_MATTER for _, _, r, _, _ in rows]
    for path, text in [("package.json", PACKAGE_JSON), ("pyproject.toml", PYPROJECT), ("Cargo.toml", CARGO),
                       ("go.mod", GO_MOD), ("requirements.txt", REQUIREMENTS)]:
        emitted += [c.range for c in constraints_in_manifest(path, text) or []]
    assert_canonical(semver, emitted)


def test_pragmas_mean_what_node_semver_means(semver: SemverOracle) -> None:
    grid = [f"0.{minor}.{patch}" for minor in range(12, 21) for patch in range(3)] + ["0.18.0-rc.1", "1.0.0"]
    for source, expected in PRAGMAS:
        expression = source.removeprefix("pragma language_version").rstrip(";")
        if any(mark in expression for mark in "!()="):
            continue  # no node-semver spelling of the source to compare with
        node_spelling = expression.replace("&&", " ").replace("||", " || ")
        pairs = [(v, r) for v in grid for r in (node_spelling, expected)]
        answers = semver.satisfies(pairs)
        assert answers[0::2] == answers[1::2], source


# PEP 440: exact agreement with packaging over X.Y.Z releases.

_SMALL = st.integers(min_value=0, max_value=3)
_RELEASE = st.lists(_SMALL, min_size=1, max_size=4).map(lambda parts: ".".join(map(str, parts)))
_SUFFIX = st.sampled_from(["", "", "", "a1", "b2", "rc1", ".post1", ".dev0", "rc1.post2", "+local.7"])
_ORDERED = st.sampled_from([">=", "<=", ">", "<", "==", "!="])


@st.composite
def pep440_specifier(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["ordered", "ordered", "wildcard", "compatible", "arbitrary"]))
    release = draw(_RELEASE)
    if kind == "wildcard":
        return draw(st.sampled_from(["==", "!="])) + release + ".*"
    if kind == "compatible":
        return "~=" + release + ("" if "." in release else ".0") + draw(_SUFFIX).split("+")[0]
    if kind == "arbitrary":
        return "===" + ".".join(draw(st.lists(_SMALL, min_size=3, max_size=3).map(lambda p: list(map(str, p)))))
    operator = draw(_ORDERED)
    suffix = draw(_SUFFIX)
    if operator not in ("==", "!="):
        suffix = suffix.split("+")[0]  # local labels only go with == and !=
    return operator + release + suffix


_CANDIDATES = [f"{major}.{minor}.{patch}" for major in range(5) for minor in range(5) for patch in range(5)]


@given(st.lists(pep440_specifier(), min_size=1, max_size=4))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_pep440_ranges_admit_exactly_the_releases_packaging_admits(
    semver: SemverOracle, specifiers: list[str],
) -> None:
    specifier_set = SpecifierSet(",".join(specifiers))
    expected = [specifier_set.contains(version) for version in _CANDIDATES]
    try:
        emitted = format_range(pep440_range(specifier_set))
    except UnrepresentableRange:
        assert not any(expected), f"{specifier_set} admits releases but was not translated"
        return
    assert_canonical(semver, [emitted])
    assert semver.satisfies([(version, emitted) for version in _CANDIDATES]) == expected, emitted


# npm ranges: the canonical form admits exactly what the original admits, prereleases included.

_XR = st.one_of(st.integers(min_value=0, max_value=3).map(str), st.sampled_from(["x", "*"]))


@st.composite
def npm_partial(draw: st.DrawFn) -> str:
    parts = draw(st.lists(_XR, min_size=1, max_size=3))
    text = ".".join(parts)
    if len(parts) == 3 and parts[2].isdigit() and draw(st.booleans()):
        text += draw(st.sampled_from(["-0", "-beta", "-beta.1", "-rc.2"]))
    return text


@st.composite
def npm_range_text(draw: st.DrawFn) -> str:
    alternatives = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if draw(st.integers(min_value=0, max_value=5)) == 0:
            alternatives.append(f"{draw(npm_partial())} - {draw(npm_partial())}")
            continue
        words = [draw(st.sampled_from(["", "^", "~", ">=", "<=", ">", "<", "="])) + draw(npm_partial())
                 for _ in range(draw(st.integers(min_value=1, max_value=3)))]
        alternatives.append(" ".join(words))
    return " || ".join(alternatives)


_NUMBER_AFTER_WILDCARD = re.compile(r"[x*]\.\d")
_NPM_CANDIDATES = [f"{major}.{minor}.{patch}" for major in range(5) for minor in range(5) for patch in range(5)]
_NPM_CANDIDATES += [f"{version}-{pre}" for version in ("0.0.0", "1.0.0", "1.2.3", "2.0.0", "3.1.0")
                    for pre in ("0", "alpha", "beta", "beta.1", "beta.2", "rc.2", "rc.3")]


@given(npm_range_text())
@example("0 - 0.0.0-0")  # node drops ">=0.0.0" (replaceGTE0): "<=0.0.0-0", which admits 0.0.0-0
@example("0 || 0 - 0.0.0-0")  # so 0.0.0-0 is in, though "<1.0.0-0" alone would not admit it
@example("<1.0.0-beta || >=1.0.0-beta")  # every prerelease of 1.0.0; "*" would admit none
@example("1.2.3-beta || 0 - 0.0.0 || >=1")  # 1.2.3-beta is not swallowed by the releases around it
@example("0.0.0-beta || <1.0.0 || >=1.0.0")  # a lone "*" would make node ignore 0.0.0-beta
@example("1.0.0-beta || >=0")  # and node's own "*" alternative makes it ignore 1.0.0-beta
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_npm_ranges_normalise_without_changing_meaning(semver: SemverOracle, text: str) -> None:
    try:
        emitted = normalise_npm_range(text)
    except UnrepresentableRange:
        # Refused only where node refuses too, where nothing matches, or for "^x.1"-style
        # wildcards that some node-semver code paths still accept and 7.8's grammar does not.
        matches_nothing = not any(semver.satisfies([(version, text) for version in _NPM_CANDIDATES]))
        assert matches_nothing or _NUMBER_AFTER_WILDCARD.search(text), text
        return
    assert_canonical(semver, [emitted])
    original = semver.satisfies([(version, text) for version in _NPM_CANDIDATES])
    assert semver.satisfies([(version, emitted) for version in _NPM_CANDIDATES]) == original, (text, emitted)


def test_compact_pragma_range_rejects_garbage() -> None:
    with pytest.raises(UnrepresentableRange):
        compact_pragma_range(">= 0.16 ||| 0.17")
