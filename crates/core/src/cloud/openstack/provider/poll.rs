//! Waiting on one server after Nova accepted an action (a delete, an `os-stop`): the
//! same `GET /servers/{id}` every time, with a short first pause that doubles up to
//! [`MAX_DELETE_POLL`], until the server is where the action leads or a deadline passes.

use super::*;

/// What one look at the server (`None`: Nova answered 404) says about the wait.
pub(super) enum Look {
    Done,
    /// Waiting longer cannot help; the message says why.
    Failed(String),
    Waiting,
}

impl OpenStackProvider {
    /// Polls server `id` until `judge` settles, for at most `deadline`; past it, the
    /// error says the server `still` ("still exists") that long `after` ("os-stop"), with
    /// its status and task state.
    pub(super) async fn poll_server(
        &self,
        id: &str,
        deadline: Duration,
        judge: impl Fn(Option<&NovaServer>) -> Look,
        (still, after): (&str, &str),
    ) -> Result<(), CloudError> {
        let call = "GET /servers/{id}";
        let start = Instant::now();
        let mut pause = self.options.delete_poll_interval.min(MAX_DELETE_POLL);
        loop {
            let resp = self
                .send(call, |s| {
                    Ok(self.nova(self.http.get(format!("{}/servers/{}", s.compute, seg(id)))))
                })
                .await?;
            let server = if resp.status() == reqwest::StatusCode::NOT_FOUND {
                None
            } else {
                let ok = ensure_success(call, resp).await?;
                Some(read_json::<ServerEnvelope>(call, ok).await?.server)
            };
            match judge(server.as_ref()) {
                Look::Done => {
                    tracing::debug!(id, after = ?start.elapsed(), "server is where the action leads");
                    return Ok(());
                }
                Look::Failed(why) => return Err(other(why)),
                Look::Waiting => {}
            }
            let elapsed = start.elapsed();
            if elapsed >= deadline {
                let secs = deadline.as_secs_f64();
                return Err(other(match &server {
                    Some(s) => format!(
                        "server '{}' ({id}) {still} {secs:.1}s after {after} (status {}, task state {})",
                        s.name,
                        s.status,
                        s.task_state.as_deref().unwrap_or("none")
                    ),
                    None => format!("server {id} {still} {secs:.1}s after {after}"),
                }));
            }
            tokio::time::sleep(pause.min(deadline.saturating_sub(elapsed))).await;
            pause = (pause * 2).min(MAX_DELETE_POLL);
        }
    }
}
