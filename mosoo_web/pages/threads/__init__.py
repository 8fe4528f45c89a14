"""The Threads pages.

- `list.py`: `/apps/[app_id]/threads`, the App's threads by section with filters (`ThreadsState`)
- `detail_state.py`: `ThreadDetailState`, one thread's header, live chat and actions
- `detail.py`: `/apps/[app_id]/threads/[thread_id]`, the page of one thread
- `labels.py`: the purpose labels and the status badge both pages show
"""

from mosoo_web.pages.threads.detail import thread_page
from mosoo_web.pages.threads.detail_state import ThreadDetailState
from mosoo_web.pages.threads.list import ThreadsState, threads_page

__all__ = ["ThreadDetailState", "ThreadsState", "thread_page", "threads_page"]
