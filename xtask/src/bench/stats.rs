//! The one median and spread every bench report uses, over f64 in any order.

/// The middle value; of an even count, the upper of the two middle ones (not their mean), so the
/// figure is always one of the values. None when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied()
}

/// The smallest and the largest value. None when there are none.
pub fn spread(values: &[f64]) -> Option<(f64, f64)> {
    let min = values.iter().copied().min_by(f64::total_cmp)?;
    let max = values.iter().copied().max_by(f64::total_cmp)?;
    Some((min, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_count_takes_the_middle_value_in_any_order() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[5.0, 4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((1.0, 3.0)));
    }

    #[test]
    fn even_count_takes_the_upper_middle_value() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(median(&[1.0, 2.0]), Some(2.0));
        assert_eq!(spread(&[4.0, 1.0, 3.0, 2.0]), Some((1.0, 4.0)));
    }

    #[test]
    fn empty_has_neither() {
        assert_eq!(median(&[]), None);
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn one_value_is_its_own_median_and_spread() {
        assert_eq!(median(&[7.5]), Some(7.5));
        assert_eq!(spread(&[7.5]), Some((7.5, 7.5)));
    }
}
