"""The Skills pages.

- `list.py`: `/apps/[app_id]/skills`, the App's skills and Upload (`SkillsState`)
- `detail.py`: `/apps/[app_id]/skills/[skill_id]`, one skill rendered, its versions and
  Agents, a new version, Fork and Uninstall (`SkillState`)
- `upload.py`: the Upload button both pages share, and its limits
- `services.py`: the `mosoo_core.skills` calls the states make, and their rows
"""

from mosoo_web.pages.skills.detail import SkillState, skill_page
from mosoo_web.pages.skills.list import SkillsState, skills_page

__all__ = ["SkillState", "SkillsState", "skill_page", "skills_page"]
