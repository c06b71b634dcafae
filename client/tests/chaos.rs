//! Chaos: `redis-lease lock` processes contend for one write lock for a bounded time while a
//! monkey `kill -9`s some of them, freezes some (SIGSTOP for longer than the lease, like a GC
//! pause: the command they run goes on writing with a token that has become stale) and drops
//! connections with `CLIENT KILL`. Every critical section writes its fencing token to a
//! resource (a plain redis-server) that refuses tokens lower than the highest it accepted.
//! Afterwards: no stale write was accepted, no two accepted sections interleave, and no token
//! was handed to two sections.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rand::Rng;
use redis_lease_testkit::{Options, Server};

const FENCE: &str = r#"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local t = tonumber(ARGV[1])
if t < cur then
  redis.call('RPUSH', 'rejected', ARGV[1] .. ' ' .. ARGV[2])
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', 'accepted', ARGV[1] .. ' ' .. ARGV[2])
return 1
"#;

fn spawn_worker(lock: &Server, res_port: u16, sha: &str, owner: &str) -> Child {
    // Two fenced writes per section, 0.1-0.7 s apart (longer than the 400 ms lease, which the
    // CLI renews; a section whose CLI is frozen outlives it); $$ names the section.
    let section = format!(
        "R='redis-cli -p {res_port}'; \
         $R EVALSHA {sha} 1 fence $REDIS_LEASE_TOKEN $$:begin >/dev/null; \
         sleep 0.$((RANDOM % 7 + 1)); \
         $R EVALSHA {sha} 1 fence $REDIS_LEASE_TOKEN $$:end >/dev/null"
    );
    Command::new(env!("CARGO_BIN_EXE_redis-lease"))
        .args([
            "--url",
            &lock.url(),
            "lock",
            "--ttl",
            "400",
            "--wait",
            "4000",
        ])
        .args(["--owner", owner])
        .args(["--grace", "100", "chaos", "--", "bash", "-c", &section])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-lease")
}

/// The owner holding `key`, from RWLOCK.INFO.
fn holder_of(conn: &mut redis::Connection, key: &str) -> Option<String> {
    let v: redis::Value = redis::cmd("RWLOCK.INFO").arg(key).query(conn).ok()?;
    let redis::Value::Array(fields) = v else {
        return None;
    };
    let holders = fields
        .chunks(2)
        .find(|p| p[0] == redis::Value::BulkString(b"holders".to_vec()))?;
    let redis::Value::Array(hs) = &holders[1] else {
        return None;
    };
    let redis::Value::Array(first) = hs.first()? else {
        return None;
    };
    first.chunks(2).find_map(|kv| match (&kv[0], &kv[1]) {
        (redis::Value::BulkString(k), redis::Value::BulkString(o)) if k == b"owner" => {
            String::from_utf8(o.clone()).ok()
        }
        _ => None,
    })
}

#[test]
fn no_stale_write_is_accepted_and_no_sections_overlap_under_chaos() {
    let lock = Server::start();
    let resource = Server::with(Options {
        no_module: true,
        ..Options::default()
    });
    let mut res = resource.conn();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(FENCE)
        .query(&mut res)
        .unwrap();
    let mut admin = lock.conn();

    let mut rng = rand::rng();
    let mut workers: Vec<(String, Child)> = Vec::new();
    let (mut started, mut killed9, mut conn_kills, mut frozen) = (0, 0, 0, 0);
    let mut paused: Vec<(u32, Instant)> = Vec::new();
    let end = Instant::now() + Duration::from_secs(15);
    while Instant::now() < end {
        let now = Instant::now();
        paused.retain(|(pid, until)| {
            if *until > now {
                return true;
            }
            unsafe { libc::kill(*pid as i32, libc::SIGCONT) };
            false
        });
        workers.retain_mut(|(_, c)| c.try_wait().map(|s| s.is_none()).unwrap_or(false));
        while workers.len() < 4 {
            let owner = format!("worker-{started}");
            workers.push((
                owner.clone(),
                spawn_worker(&lock, resource.port, &sha, &owner),
            ));
            started += 1;
        }
        match rng.random_range(0..10) {
            0 if !workers.is_empty() => {
                let i = rng.random_range(0..workers.len());
                if !paused.iter().any(|(pid, _)| *pid == workers[i].1.id()) {
                    let (_, mut victim) = workers.swap_remove(i);
                    let _ = victim.kill(); // SIGKILL: its command dies with it
                    let _ = victim.wait();
                    killed9 += 1;
                }
            }
            1 => {
                // Freeze the holder past its lease; the command it runs goes on.
                let holder = holder_of(&mut admin, "chaos");
                let found = workers.iter().find(|(o, _)| Some(o) == holder.as_ref());
                if let Some((_, w)) = found {
                    let pid = w.id();
                    if !paused.iter().any(|(p, _)| *p == pid) {
                        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
                        let pause = Duration::from_millis(rng.random_range(600..900));
                        paused.push((pid, Instant::now() + pause));
                        frozen += 1;
                    }
                }
            }
            2 => {
                let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("normal")
                    .arg("SKIPME")
                    .arg("yes")
                    .query(&mut admin);
                conn_kills += 1;
            }
            _ => {}
        }
        sleep(Duration::from_millis(120));
    }
    for (pid, _) in paused.drain(..) {
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    }
    // Let the survivors finish (bounded), then stop whatever is left.
    let deadline = Instant::now() + Duration::from_secs(15);
    for (_, mut w) in workers {
        while w.try_wait().map(|s| s.is_none()).unwrap_or(false) && Instant::now() < deadline {
            sleep(Duration::from_millis(20));
        }
        let _ = w.kill();
        let _ = w.wait();
    }
    sleep(Duration::from_millis(1000)); // orphaned sections write at most 0.7 s later

    let accepted: Vec<String> = redis::cmd("LRANGE")
        .arg("accepted")
        .arg(0)
        .arg(-1)
        .query(&mut res)
        .unwrap();
    let rejected: Vec<String> = redis::cmd("LRANGE")
        .arg("rejected")
        .arg(0)
        .arg(-1)
        .query(&mut res)
        .unwrap();
    let entries: Vec<(u64, String, String)> = accepted
        .iter()
        .map(|e| {
            let (t, rest) = e.split_once(' ').unwrap();
            let (pid, phase) = rest.split_once(':').unwrap();
            (t.parse().unwrap(), pid.to_string(), phase.to_string())
        })
        .collect();

    // Stale writes accepted: a token below one accepted before it.
    let mut high = 0;
    let mut stale_accepted = 0;
    for (t, _, _) in &entries {
        if *t < high {
            stale_accepted += 1;
        }
        high = high.max(*t);
    }
    // One token, one section.
    let mut owners: HashMap<u64, String> = HashMap::new();
    let mut shared_tokens = 0;
    for (t, pid, _) in &entries {
        if owners.entry(*t).or_insert_with(|| pid.clone()) != pid {
            shared_tokens += 1;
        }
    }
    // Overlap: another section's accepted write between a section's accepted begin and end.
    let mut overlaps = 0;
    let mut completed = 0;
    for (i, (t, pid, phase)) in entries.iter().enumerate() {
        if phase != "begin" {
            continue;
        }
        if let Some(j) = entries[i + 1..]
            .iter()
            .position(|(t2, p2, ph)| t2 == t && p2 == pid && ph == "end")
        {
            completed += 1;
            if entries[i + 1..i + 1 + j].iter().any(|(t2, _, _)| t2 != t) {
                overlaps += 1;
            }
        }
    }
    println!(
        "chaos: {started} lock processes, {killed9} killed with SIGKILL, {frozen} frozen past their lease, \
         {conn_kills} rounds of CLIENT KILL; \
         {} fenced writes accepted ({completed} complete sections), {} stale writes rejected, \
         {stale_accepted} stale writes accepted, {overlaps} overlapping sections, {shared_tokens} shared tokens",
        entries.len(),
        rejected.len()
    );
    assert!(
        completed >= 8,
        "the lock changed hands often enough to mean something"
    );
    assert!(
        killed9 >= 3 && frozen >= 3 && conn_kills >= 3,
        "the monkey did its work"
    );
    assert_eq!(stale_accepted, 0);
    assert_eq!(overlaps, 0);
    assert_eq!(shared_tokens, 0);
    // The server survived it all.
    let pong: String = redis::cmd("PING").query(&mut lock.conn()).unwrap();
    assert_eq!(pong, "PONG");
}
