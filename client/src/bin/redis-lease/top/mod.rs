//! `redis-lease top`: a live view of one server or a Cluster (every master), refreshed every
//! second: the busiest keys with their holders, waiters, oldest wait and grants/s, the `INFO
//! lease` figures and the wait histogram. `q` (or Ctrl-C, Esc) quits. `--once` prints one
//! frame as text instead (for scripts, and the README's capture).

mod sample;
mod view;

use std::time::Duration;

use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::Terminal;

use crate::{out, Failure};
use sample::Sampler;

/// Runs the live view until `q`; with `once`, prints one frame of `width` x `height`.
pub async fn top(url: &str, once: Option<(u16, u16)>) -> Result<u8, Failure> {
    let mut sampler = Sampler::connect(url).await?;
    if let Some((w, h)) = once {
        // Two samples a second apart: rates need an interval.
        sampler.sample().await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = sampler.sample().await?;
        let mut t = Terminal::new(TestBackend::new(w, h)).map_err(io)?;
        t.draw(|f| view::draw(f, &s, url)).map_err(io)?;
        let buf = t.backend().buffer();
        for y in 0..buf.area.height {
            let line: String = (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect();
            out::line(format_args!("{}", line.trim_end()))?;
        }
        return Ok(0);
    }
    let (keys_tx, mut keys) = tokio::sync::mpsc::unbounded_channel();
    let mut terminal = ratatui::init();
    // Keys are read on a thread of their own (crossterm's read blocks).
    std::thread::spawn(move || loop {
        match event::read() {
            Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => {
                let quit = matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                    || (k.code == KeyCode::Char('c')
                        && k.modifiers.contains(KeyModifiers::CONTROL));
                if quit && keys_tx.send(()).is_err() {
                    return;
                }
                if quit {
                    return;
                }
            }
            Ok(_) => {}
            Err(_) => return,
        }
    });
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let result = loop {
        tokio::select! {
            _ = tick.tick() => {
                match sampler.sample().await {
                    Ok(s) => {
                        if let Err(e) = terminal.draw(|f| view::draw(f, &s, url)) {
                            break Err(io(e));
                        }
                    }
                    Err(e) => break Err(Failure::from(e)),
                }
            }
            _ = keys.recv() => break Ok(0),
        }
    };
    ratatui::restore();
    result
}

fn io(e: std::io::Error) -> Failure {
    Failure::from(redis_lease_client::Error::Redis(redis::RedisError::from(e)))
}
