"""`/apps/[app_id]/agents/[agent_id]`: Preview, the Agent's configuration beside a live test chat.

- `state.py`: `PreviewState`, the form's autosave handlers and the chat's Send / New chat
- `services.py`: the `mosoo_core` calls the state makes (in a worker thread) and their rows
- `fields.py`: the form's fields: labels, "Fix" targets, the values of the choice fields
- `form.py`: the form; `readiness.py`: what blocks the Agent and the Pet's pending changes
- `sandbox_panel.py`, `sandbox_state.py`: an Assistant's sandbox, its status and operations
- `pool_panel.py`: a Task's warm pool (its sandboxes standing by, hits and misses)
- `chat.py`: the chat panel; `page.py`: the page that puts the form and the chat side by side
"""

from mosoo_web.pages.preview.page import preview_page
from mosoo_web.pages.preview.state import PreviewState

__all__ = ["PreviewState", "preview_page"]
