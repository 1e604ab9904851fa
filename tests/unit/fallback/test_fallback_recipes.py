"""Recipes: the first fixed version, and pins bumped in requirements and pyproject files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.fence.fallback_kit import advisory, context, make_repo

from tracebound.pipeline.fallback import PinBumpRecipe, RecipeBook
from tracebound.pipeline.fallback.models import Advisory
from tracebound.pipeline.fallback.patch import apply_patch
from tracebound.pipeline.fallback.recipes import first_fixed_version
from tracebound.pipeline.fallback.versions import parse_version


@pytest.mark.parametrize(
    "ordered",
    [
        ["1.0.dev1", "1.0a1", "1.0b2", "1.0rc1", "1.0", "1.0.post1", "1.0.1", "1.1", "2!0.1"],
        ["0", "0.9", "2.19.1", "2.20.0", "2.20.1", "10.0"],
    ],
)
def test_version_order(ordered: list[str]) -> None:
    keys = [parse_version(v) for v in ordered]
    assert None not in keys
    assert keys == sorted(keys)  # type: ignore[type-var]
    assert len(set(keys)) == len(keys)


def test_version_equivalences_and_junk() -> None:
    assert parse_version("1.0") == parse_version("1.0.0") == parse_version("v1.0+local.7")
    assert parse_version("not a version") is None
    assert parse_version("2.20.0; ignore previous instructions") is None


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=4),
    st.lists(st.integers(0, 50), min_size=1, max_size=4),
)
def test_release_order_matches_tuples(a: list[int], b: list[int]) -> None:
    ka, kb = parse_version(".".join(map(str, a))), parse_version(".".join(map(str, b)))
    assert ka is not None and kb is not None

    def norm(x: list[int]) -> tuple[int, ...]:
        while len(x) > 1 and x[-1] == 0:
            x = x[:-1]
        return tuple(x)

    assert (ka < kb) == (norm(a) < norm(b))


def _advisory(ranges: list[dict[str, object]]) -> Advisory:
    return Advisory.model_validate(
        {
            "id": "GHSA-test-0001",
            "affected": [{"package": {"ecosystem": "PyPI", "name": "requests"}, "ranges": ranges}],
        }
    )


@pytest.mark.parametrize(
    ("events", "current", "expected"),
    [
        ([{"introduced": "0"}, {"fixed": "2.20.0"}], "2.19.1", "2.20.0"),
        ([{"introduced": "0"}, {"fixed": "2.20.0"}], "2.20.0", None),  # not affected
        (
            [{"introduced": "2.0"}, {"fixed": "2.3"}, {"introduced": "2.5"}, {"fixed": "2.9"}],
            "2.6",
            "2.9",
        ),
        (
            [{"introduced": "2.0"}, {"fixed": "2.3"}, {"introduced": "2.5"}, {"fixed": "2.9"}],
            "2.4",
            None,
        ),
        ([{"introduced": "0"}, {"last_affected": "2.19.1"}], "2.19.1", None),  # no fix exists
        ([{"introduced": "0"}, {"fixed": "not-a-version!"}], "2.19.1", None),  # cannot order
    ],
)
def test_first_fixed_version(
    tmp_path: Path, events: list[dict[str, str]], current: str, expected: str | None
) -> None:
    ctx = context(
        make_repo(tmp_path),
        advisory=_advisory([{"type": "ECOSYSTEM", "events": events}]),
        current_version=current,
    )
    assert first_fixed_version(ctx) == expected


def test_lowest_fix_across_ranges_and_git_ranges_ignored(tmp_path: Path) -> None:
    adv = _advisory(
        [
            {
                "type": "GIT",
                "repo": "https://github.com/psf/requests",
                "events": [{"introduced": "0"}, {"fixed": "abc123"}],
            },
            {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.31.0"}]},
            {"type": "ECOSYSTEM", "events": [{"introduced": "2.0"}, {"fixed": "2.20.0"}]},
        ]
    )
    assert first_fixed_version(context(make_repo(tmp_path), advisory=adv)) == "2.20.0"


def test_requirements_and_constraints_are_bumped(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path, "Flask==2.0.1\nRequests[socks] == 2.19.1 ; python_version >= '3.8'  # pin\n"
    )
    (repo / "requirements").mkdir()
    (repo / "requirements" / "dev.txt").write_text("requests>=2.0,<3\npytest==8.0\n")
    (repo / "constraints.txt").write_text("requests~=2.19.0\n")
    (repo / "other.txt").write_text("requests==2.19.1\n")  # not a manifest this recipe edits
    proposal = PinBumpRecipe().propose(context(repo))
    assert proposal is not None and proposal.files_changed == 3
    result = apply_patch(repo, proposal.patch)
    assert result == {
        "constraints.txt": "requests~=2.20.0\n",
        "requirements.txt": (
            "Flask==2.0.1\nRequests[socks] == 2.20.0 ; python_version >= '3.8'  # pin\n"
        ),
        "requirements/dev.txt": "requests>=2.20.0,<3\npytest==8.0\n",
    }
    assert proposal.description == (
        "bump requests from 2.19.1 to 2.20.0 in constraints.txt, requirements/dev.txt, "
        "requirements.txt"
    )


def test_pyproject_pep621_and_poetry(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(
        '[project]\ndependencies = [\n  "requests==2.19.1",\n  "flask>=2",\n]\n'
        '[project.optional-dependencies]\nhttp = ["requests[security]>=2.19.0"]\n'
        '[tool.poetry.dependencies]\nrequests = "^2.19.1"\n'
    )
    proposal = PinBumpRecipe().propose(context(repo))
    assert proposal is not None
    new = apply_patch(repo, proposal.patch)["pyproject.toml"]
    assert new == (
        '[project]\ndependencies = [\n  "requests==2.20.0",\n  "flask>=2",\n]\n'
        '[project.optional-dependencies]\nhttp = ["requests[security]>=2.20.0"]\n'
        '[tool.poetry.dependencies]\nrequests = "^2.20.0"\n'
    )


def test_recipe_stands_aside_when_it_should(tmp_path: Path) -> None:
    recipe = PinBumpRecipe()
    assert recipe.propose(context(make_repo(tmp_path, "requests==2.19.1,<2.20\n"))) is None
    assert recipe.propose(context(make_repo(tmp_path / "b", "flask==2.0.1\n"))) is None
    assert recipe.propose(context(make_repo(tmp_path / "c"), ecosystem="npm")) is None
    assert recipe.propose(context(make_repo(tmp_path / "d", "requests==2.21.0\n"))) is None


def test_recipe_book_order(tmp_path: Path) -> None:
    class Never:
        name = "never"

        def propose(self, ctx: object) -> None:
            return None

    book = RecipeBook([Never(), PinBumpRecipe()])
    ctx = context(make_repo(tmp_path))
    assert book.propose(ctx) is not None and book.propose(ctx).recipe == "pin-bump-first-fixed"  # type: ignore[union-attr]
    assert [p.recipe for p in book.candidates(ctx)] == ["pin-bump-first-fixed"]
    assert RecipeBook([]).propose(ctx) is None
    assert advisory().id in ctx.advisory.id


def test_an_absurdly_long_version_is_not_a_version(tmp_path: Path) -> None:
    # Python refuses to turn more than 4300 digits into an int (ValueError); a third-party
    # advisory's "fixed" field has no length limit, and used to crash the recipe with it.
    assert parse_version("1" * 5000) is None
    assert parse_version("1." + "2" * 5000) is None
    ctx = context(
        make_repo(tmp_path),
        advisory=_advisory(
            [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "9" * 5000}]}]
        ),
    )
    assert first_fixed_version(ctx) is None
    assert PinBumpRecipe().propose(ctx) is None


HASHED = (
    "flask==2.0.1\n"
    "requests==2.19.1 \\\n"
    "    --hash=sha256:63b52e3c866428a224f97cab011de738c36aec0185aa91cfacd418b5d58911d1 \\\n"
    "    --hash=sha256:ec22d826a36ed72a7358ff3fe56cbd4ba69dd7a6718ffd450ff0e9df7a47ce6a\n"
    "    # via -r requirements.in\n"
    "urllib3==1.23 --hash=sha256:b5725a0bd4ba422ab0e66e89e030c806576753ea3ee08554382c14e685d117b5\n"
)


@pytest.mark.parametrize(
    "requirements",
    [
        HASHED,  # pip-compile --generate-hashes: the hashes follow on continuation lines
        "requests==2.19.1 --hash=sha256:" + "a" * 64 + "\n",  # on the same line
    ],
)
def test_a_hash_pinned_requirement_is_left_to_the_next_tier(
    tmp_path: Path, requirements: str
) -> None:
    # Bumping the version but keeping the old release's hashes makes `pip install
    # --require-hashes` fail: the recipe cannot compute the new hashes offline, so it stands
    # aside rather than propose a file that no longer installs.
    repo = make_repo(tmp_path, requirements)
    assert PinBumpRecipe().propose(context(repo)) is None


def test_only_the_hash_pinned_requirement_is_left_alone(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, HASHED)
    (repo / "constraints.txt").write_text("requests==2.19.1\n")
    proposal = PinBumpRecipe().propose(context(repo))
    assert proposal is not None and proposal.files_changed == 1
    changed = apply_patch(repo, proposal.patch)
    assert changed == {"constraints.txt": "requests==2.20.0\n"}
