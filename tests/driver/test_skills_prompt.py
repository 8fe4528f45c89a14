"""The `openai` runtime lists the bound skills in its system prompt (progressive disclosure:
names, descriptions and where SKILL.md is; the model reads a skill when a task fits it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.backends.openai import OpenAIBackend, skills_prompt, xml_escape
from driver.protocol import GatewayGrant, SkillBinding
from tests.driver.conftest import GRANT, RecordingSink, command, make_spec, wait_for
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn

CHANGELOG = SkillBinding(
    id="01SKILLCHANGELOG0000000000",
    name="changelog",
    description="Write release notes from merged pull requests.",
    version=3,
    path="/opt/mosoo/skills/changelog/SKILL.md",
)
ODD = SkillBinding(
    id="01SKILLODD0000000000000000",
    name="odd-one",
    description='Handles <tags> & "quotes" in </description> text.',
    version=1,
    path="/opt/mosoo/skills/odd-one/SKILL.md",
)


def test_the_block_lists_each_skill_with_its_name_description_and_skill_md_path() -> None:
    prompt = skills_prompt([CHANGELOG])
    assert prompt == (
        "When a task matches one of these skills, read its SKILL.md with the read tool before "
        "you start, and follow it (paths it mentions are relative to its folder).\n"
        "<available_skills>\n"
        "<skill>\n"
        "<name>changelog</name>\n"
        "<description>Write release notes from merged pull requests.</description>\n"
        "<location>/opt/mosoo/skills/changelog/SKILL.md</location>\n"
        "</skill>\n"
        "</available_skills>"
    )


def test_a_description_cannot_close_the_block_or_open_tags_of_its_own() -> None:
    prompt = skills_prompt([ODD])
    assert 'Handles &lt;tags&gt; &amp; "quotes" in &lt;/description&gt; text.' in prompt
    assert prompt.count("</description>") == 1
    assert prompt.count("</available_skills>") == 1


@pytest.mark.parametrize(
    "text", ["", "plain", "a & b < c > d", "&amp; already", "<<>>&&", "'\"quotes\"'", "ünï ✓"]
)
def test_the_escape_is_the_standard_librarys(text: str) -> None:
    from xml.sax.saxutils import escape

    assert xml_escape(text) == escape(text)


@pytest.mark.parametrize("api_style", ["chat_completions", "responses"])
async def test_the_system_prompt_sent_to_the_model_carries_the_block_only_with_skills(
    workspace: Path, model_server: ScriptedOpenAIServer, api_style: str
) -> None:
    prompts: list[str] = []
    for run_id, bound in (("run-1", [CHANGELOG, ODD]), ("run-2", [])):
        model_server.add(TextTurn("Done."))
        sink = RecordingSink()
        spec = make_spec(
            workspace,
            session_id=f"ses-{run_id}",
            skills=bound,
            gateway=GatewayGrant(grant=GRANT, api_style=api_style),  # type: ignore[arg-type]
        )
        backend = OpenAIBackend(spec, sink, model_base_url=model_server.base_url, max_retries=0)
        await backend.start()
        try:
            await backend.handle_command(
                command("input.start", {"run_id": run_id, "text": "hi", "attachments": []})
            )
            await wait_for(lambda: "run.completed" in sink.kinds(run_id), 10, run_id)  # noqa: B023
        finally:
            await backend.close()
    if api_style == "chat_completions":
        prompts = [request.messages[0]["content"] for request in model_server.chat_requests]
    else:
        prompts = [request.body["instructions"] for request in model_server.responses_requests]
    with_skills, without = prompts
    assert with_skills.startswith("You are a careful test agent.")
    assert skills_prompt([CHANGELOG, ODD]) in with_skills
    assert with_skills.index("<name>changelog</name>") < with_skills.index("<name>odd-one</name>")
    assert "<available_skills>" not in without and "SKILL.md" not in without
