"""The Preview's skills picker: each binding shown with its skill's name and version choices;
a binding the App cannot resolve is missing."""

from __future__ import annotations

from mosoo_web.pages.preview.services import SkillOption, SkillRow, bound_skill_rows

OPTIONS = [SkillOption("01CHANGELOG", "changelog", 3), SkillOption("01TONE", "tone", 1)]


def test_bindings_show_the_skill_name_what_they_follow_and_the_versions_to_choose() -> None:
    rows = bound_skill_rows(["01CHANGELOG@2", "01TONE"], OPTIONS)
    assert rows == [
        SkillRow("01CHANGELOG@2", "01CHANGELOG", "changelog", "2", ["latest", "3", "2", "1"]),
        SkillRow("01TONE", "01TONE", "tone", "latest", ["latest", "1"]),
    ]


def test_an_unknown_skill_or_a_version_it_does_not_have_is_missing() -> None:
    rows = bound_skill_rows(["01GONE", "01TONE@4"], OPTIONS)
    assert [(row.label, row.missing) for row in rows] == [("01GONE", True), ("tone", True)]
