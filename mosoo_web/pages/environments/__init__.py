"""The Environments pages.

- `list.py`: `/apps/[app_id]/environments`, the App's environments (`EnvironmentsState`)
- `editor_state.py`: `EnvironmentEditorState`, one environment's form, its Save and its build
- `editor.py`: `/apps/[app_id]/environments/[environment_id]`, the editor and its revisions
- `services.py`: the `mosoo_core.environments` calls the states make, and their rows
- `labels.py`: how a network policy, packages and a build read (also in the Preview picker)
"""

from mosoo_web.pages.environments.editor import environment_page
from mosoo_web.pages.environments.editor_state import EnvironmentEditorState
from mosoo_web.pages.environments.list import EnvironmentsState, environments_page

__all__ = ["EnvironmentEditorState", "EnvironmentsState", "environment_page", "environments_page"]
