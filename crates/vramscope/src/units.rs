//! Number formatting for humans, for every renderer (terminal, SVG, HTML, the commands):
//! thousands separators, binary byte units (adaptive, or GiB for a chart headed in GiB), short
//! counts, percentages.

/// `8030261248` → `8,030,261,248`.
pub fn thousands(n: u64) -> String {
    vramscope_core::text::thousands(n)
}

/// Bytes in binary units with three significant figures (`14.96 GiB`, `512 B`).
pub fn bytes(n: u64) -> String {
    vramscope_core::text::bytes(n)
}

/// Bytes in a GiB (2^30).
pub const GIB: u64 = 1 << 30;

/// The binary unit a chart is labelled in, chosen once for the chart from its scale so that
/// its axis, its heading and its figures agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub name: &'static str,
    pub bytes: u64,
}

impl Unit {
    pub const GIB: Unit = Unit {
        name: "GiB",
        bytes: GIB,
    };

    /// The largest of B, KiB, MiB and GiB that `max` bytes reach: GiB from 1 GiB up (every
    /// model of a few hundred million parameters and more), so a tiny model's chart reads
    /// 1.50 MiB where it read 0.00 GiB.
    pub fn for_max(max: u64) -> Unit {
        [("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)]
            .into_iter()
            .find(|&(_, b)| max >= b)
            .map_or(
                Unit {
                    name: "B",
                    bytes: 1,
                },
                |(name, bytes)| Unit { name, bytes },
            )
    }

    /// `n` bytes as a number of this unit.
    pub fn of(self, n: f64) -> f64 {
        n / self.bytes as f64
    }

    /// `n` bytes in this unit with two decimals and no unit name (`14.96`).
    pub fn fixed(self, n: u64) -> String {
        format!("{:.2}", self.of(n as f64))
    }
}

/// Bytes as GiB with two decimals and no unit (`14.96`): the figures of a table whose heading
/// names GiB.
pub fn gib(n: u64) -> String {
    Unit::GIB.fixed(n)
}

/// A signed byte count as GiB with a sign and two decimals (`+1.25`, `-0.50`): a saving or a
/// change in a GiB column.
pub fn gib_signed(n: i64) -> String {
    format!("{:+.2}", n as f64 / GIB as f64)
}

/// A parameter count in short form (`8.03 B`, `124.4 M`, `652.5 K`).
pub fn short_count(n: u64) -> String {
    let v = n as f64;
    if v >= 1e12 {
        format!("{:.2} T", v / 1e12)
    } else if v >= 1e9 {
        format!("{:.2} B", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} K", v / 1e3)
    } else {
        n.to_string()
    }
}

/// `part` as a percentage of `whole` with one decimal.
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    format!("{:.1}%", part as f64 * 100.0 / whole as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(8030261248), "8,030,261,248");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        // 16,060,522,496 B / 2^30 = 14.957...
        assert_eq!(bytes(16_060_522_496), "14.96 GiB");
        assert_eq!(short_count(8_030_261_248), "8.03 B");
        // 16,060,522,496 / 2^30 = 14.957… → two decimals; 2^29 = 0.5 GiB.
        assert_eq!(gib(16_060_522_496), "14.96");
        assert_eq!(gib(1 << 29), "0.50");
        // ±(2^30 + 2^28) = ±1.25 GiB.
        assert_eq!(gib_signed(1_342_177_280), "+1.25");
        assert_eq!(gib_signed(-1_342_177_280), "-1.25");
    }

    #[test]
    fn a_chart_unit_is_the_largest_its_scale_reaches() {
        assert_eq!(Unit::for_max(1 << 30), Unit::GIB);
        assert_eq!(Unit::for_max(80 << 30).name, "GiB");
        // One byte short of a GiB is 1023.99… MiB: MiB.
        assert_eq!(Unit::for_max((1 << 30) - 1).name, "MiB");
        assert_eq!(Unit::for_max(1 << 20).name, "MiB");
        assert_eq!(Unit::for_max(1536).name, "KiB");
        assert_eq!(Unit::for_max(1023).name, "B");
        assert_eq!(Unit::for_max(0).name, "B");
        // 3,932,160 B = 3.75 × 2^20.
        assert_eq!(Unit::for_max(1 << 22).fixed(3_932_160), "3.75");
        assert_eq!(percent(1, 3), "33.3%");
    }
}
