"""The run store: finished runs kept by their key (`key`) and reused (`runs`); `cli` lists and prunes it."""
