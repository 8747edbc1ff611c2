mod common;
use common::pkt::*;

#[test]
fn probe() {
    with_env(&Cfg::default(), |env| {
        for (len, meta) in [(14usize, 0usize), (18, 4), (16, 4), (14, 4), (20, 8), (24, 8)] {
            let data = vec![0u8; len];
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| env.run_meta(Side::Inside, &data, meta)));
            eprintln!("len {len} meta {meta}: {:?}", r.as_ref().map(|(v, o)| (verdict_name(*v), o.len())).map_err(|_| "ERR"));
        }
    });
}
