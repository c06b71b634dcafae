//! Chaos: `redis-lease lock` processes contend for one write lock for a bounded time while a
//! monkey `kill -9`s some of them (their commands live on as orphans with a stale token) and
//! drops connections with `CLIENT KILL`. Every critical section writes its fencing token to a
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

fn spawn_worker(lock: &Server, res_port: u16, sha: &str) -> Child {
    // Two fenced writes per section, 0.1-0.7 s apart (longer than the 400 ms lease, which the
    // CLI renews; an orphaned section outlives it); $$ names the section.
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
        .args(["--grace", "100", "chaos", "--", "bash", "-c", &section])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-lease")
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
    let mut workers: Vec<Child> = Vec::new();
    let (mut started, mut killed9, mut conn_kills) = (0, 0, 0);
    let end = Instant::now() + Duration::from_secs(12);
    while Instant::now() < end {
        workers.retain_mut(|c| c.try_wait().map(|s| s.is_none()).unwrap_or(false));
        while workers.len() < 4 {
            workers.push(spawn_worker(&lock, resource.port, &sha));
            started += 1;
        }
        match rng.random_range(0..10) {
            0..=2 if !workers.is_empty() => {
                let i = rng.random_range(0..workers.len());
                let mut victim = workers.swap_remove(i);
                let _ = victim.kill(); // SIGKILL: its section lives on as an orphan
                let _ = victim.wait();
                killed9 += 1;
            }
            3..=4 => {
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
    // Let the survivors and orphans finish (bounded), then stop whatever is left.
    let deadline = Instant::now() + Duration::from_secs(15);
    for mut w in workers {
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
        "chaos: {started} lock processes, {killed9} killed with SIGKILL, {conn_kills} rounds of CLIENT KILL; \
         {} fenced writes accepted ({completed} complete sections), {} stale writes rejected, \
         {stale_accepted} stale writes accepted, {overlaps} overlapping sections, {shared_tokens} shared tokens",
        entries.len(),
        rejected.len()
    );
    assert!(
        completed >= 8,
        "the lock changed hands often enough to mean something"
    );
    assert!(killed9 >= 5 && conn_kills >= 5, "the monkey did its work");
    assert_eq!(stale_accepted, 0);
    assert_eq!(overlaps, 0);
    assert_eq!(shared_tokens, 0);
    // The server survived it all.
    let pong: String = redis::cmd("PING").query(&mut lock.conn()).unwrap();
    assert_eq!(pong, "PONG");
}
