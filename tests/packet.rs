mod common;
use common::pkt::*;

#[test]
fn probe() {
    let t = std::time::Instant::now();
    with_env(&Cfg::default(), |env| {
        eprintln!("env ready after {:?}", t.elapsed());
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let (v, out) = env.inside(&p.build());
        eprintln!("verdict {} out {}", verdict_name(v), hex(&out));
        eprintln!("maps {:?}", env.mappings());
        let (v, out) = env.run_meta(Side::Inside, &[0u8; 14], 4);
        eprintln!("meta verdict {} len {}", verdict_name(v), out.len());
        eprintln!("stats {:?}", env.stats());
    });
    eprintln!("total {:?}", t.elapsed());
}
